"""Scenario: `healthy_generation_server` started with its loop called as a Thread's target.

The same served model and client (a prompt every 45 s). Rank 0 starts its server with
``threading.Thread(target=server.serve_forever(), daemon=True).start()``: the call runs the
accept loop on the main thread, which is where the service meant to serve anyway, so it works;
the Thread is never started and the lines after it never run. The liar of the called-target
rule (serve_thread_called: a training rank serving on its main thread by that mistake, hung):
the stacks and the line are the same, the job is a service between requests.
"""

from __future__ import annotations

from healthy_generation_server import main

if __name__ == "__main__":
    main(thread_called=True)
