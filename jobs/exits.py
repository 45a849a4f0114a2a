"""The exit codes of every `logreplay` job (docs/architecture.md) and the guard that maps a
job's failure to them; shared by the CLI (:mod:`jobs.cli`) and the jobs run on their own
(`spark-submit jobs/audit.py ...`), so that neither imports the other."""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable

OK = 0  # done (the gate passed, the dump decoded)
FAILED = 1  # a check failed: the gate, `dump --verify`, the demo's truth
USAGE = 2  # usage or configuration error: a missing path, an unknown key
UNEXPECTED = 3  # anything else: a bug, an interrupted run


def guarded(job: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a job with the exit codes above: a configuration error is USAGE and names the key;
    anything unexpected is UNEXPECTED with its traceback."""
    from jobs.progress import running
    from replay.config import ConfigError

    name = getattr(args, "command", None) or job.__module__.rsplit(".", 1)[-1]
    try:
        # decode, audit, gate and synth show progress (their parsers have --quiet)
        with running(name, getattr(args, "quiet", True)):
            return job(args)
    except ConfigError as e:
        print(f"logreplay: configuration error: {e}", file=sys.stderr)
        return USAGE
    except BrokenPipeError:
        return OK
    except KeyboardInterrupt:
        return UNEXPECTED
    except Exception:  # the job's last line of defence: say what broke, exit 3
        traceback.print_exc()
        return UNEXPECTED


def ended(code: int) -> int:
    """``code``, as the process's last step (the command line's entry, a job run by
    spark-submit): what the process holds is frozen out of the garbage collector before
    Python's own exit collects it.

    Why: a job's process holds a few hundred thousand objects (PySpark's, Great Expectations',
    the report's) and many proxies of the driver JVM's objects, each of which, collected,
    tells the JVM to release its object over the gateway. Python's exit collected them all,
    one call at a time, for ~0.8 s after the demo's audit had printed its last line; frozen,
    the exit takes 0.03-0.08 s (docs/benchmarks.md). Exit hooks still run and
    reference-counted objects (open files) are still released; only the collector's last
    pass, whose result nobody sees, is skipped. Never called inside a caller's process (a
    test, a notebook): the jobs' ``main`` functions do not call it."""
    import gc

    gc.freeze()
    return code


def job_main(
    prog: str,
    doc: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: list[str] | None = None,
) -> int:
    """A job's own command line (`spark-submit jobs/<job>.py ...`): its arguments, guarded."""
    p = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    args.command = prog  # the job's name in progress lines (its module is __main__ here)
    return guarded(run, args)
