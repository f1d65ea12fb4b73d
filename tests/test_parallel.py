"""map_ordered: in order on a process pool, and never a fork of a process running other threads."""

import threading

from tasks.core.parallel import map_ordered, pool_context


def test_results_in_input_order_with_a_thread_running():
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, daemon=True)  # as MLflow or Prefect threads would be
    helper.start()
    try:
        assert pool_context(abs).get_start_method() == "forkserver"
        assert map_ordered(abs, list(range(-20, 0)), workers=2, desc="test") == list(range(20, 0, -1))
    finally:
        stop.set()
        helper.join()
