from tokenwatt.cli import main

main()
