"""The flow's guard against CPython 3.11's thread-unsafe AST constructor (flows/ast_lock.py)."""

import subprocess
import sys

from tests.conftest import REPO

# Four threads parse while finalisers (Python code run by the garbage collector) switch the GIL
# mid-parse: how numpy.load's header parsing in two shards meets. Prints the SystemErrors seen.
RACE = """
import ast, gc, sys, threading
if sys.argv[1] == "guarded":
    from flows.ast_lock import serialise_ast_parse
    serialise_ast_parse()
source = "x = " + "[" * 50 + "1" + "]" * 50 + "\\n" + "\\n".join(
    f"y{i} = {{'a': ({i}, 2.0), 'b': [1, 2, 3]}}" for i in range(200)
)
class Finalised:
    def __del__(self):
        sum(range(50))
errors = []
def parse_repeatedly():
    for _ in range(60):
        junk = [Finalised() for _ in range(50)]
        for item in junk:
            item.cycle = item
        del junk
        try:
            ast.literal_eval("{'descr': '<f4', 'shape': (3, 4)}")
            ast.parse(source)
        except SystemError as error:
            errors.append(error)
sys.setswitchinterval(1e-6)
gc.set_threshold(50, 5, 5)
threads = [threading.Thread(target=parse_repeatedly) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(errors))
"""


def race(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", RACE, mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return int(done.stdout.strip())


def test_parsing_on_threads_fails_without_the_guard_and_never_with_it():
    # Python 3.11 without the lock: the race shows (if a later CPython fixes it, this says so)
    if sys.version_info < (3, 12):
        assert race("unguarded") > 0
    assert race("guarded") == 0
