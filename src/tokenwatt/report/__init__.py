"""Results and their views: the versioned result file, the terminal and HTML reports, compare.

The result file (``schema``) is the product; ``terminal``, ``html`` and ``compare`` only
read it. Nothing here measures anything.
"""

from __future__ import annotations
