"""What a probe sends: seeded workloads and prompts, arrival schedules, traces (Azure,
Mooncake, agent traces), conversations, and the schedule that deals them out. Pure data:
nothing here opens a socket or reads a clock."""
