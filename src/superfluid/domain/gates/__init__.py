"""The speculation gates of docs/contract.md §7, one small state machine each.

- `depth`: adaptive draft depth per lane count (model-based argmax of goodput);
- `yield_floor`: per-request yield verdicts and the per-model abandonment they can cause;
- `throughput`: speculate-or-plain per lane count from live measurements;
- `reprobe`: how long a throughput loss lasts before measuring again;
- `policy`: the per-model facade the executor talks to.

Time enters as numbers (seconds) passed in; nothing here reads a clock.
"""
