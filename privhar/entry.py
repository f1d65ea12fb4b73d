"""How the ``privhar`` command runs as a process: one-line errors, SIGTERM as an error."""

from __future__ import annotations

import signal
import sys

import click

from tasks.core.errors import ERROR_PREFIX, PrivharError, printable


class Terminated(SystemExit):
    """SIGTERM, raised where the process was: it unwinds like an error and ends with status 143 and one line."""


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM (dvc, Prefect, kill) unwinds like an error: staging folders go, the MLflow run ends as FAILED, a
    run's dvc and stages are ended (flows/pipeline.py)."""
    raise Terminated(128 + signum)


def store_problem(error: Exception) -> str | None:
    """An MLflow store that cannot be read or written (a full disk, a damaged ``mlflow.db``) as one line naming it,
    or None for any other error (issue 35: a full disk gave 23 tracebacks). SQLAlchemy and MLflow are only
    consulted where the command imported them."""
    kinds = [
        getattr(sys.modules.get(module), name, None)
        for module, name in (
            ("sqlalchemy.exc", "SQLAlchemyError"),
            ("mlflow.exceptions", "MlflowException"),
        )
    ]
    database, mlflow = (kind is not None and isinstance(error, kind) for kind in kinds)
    if not (database or mlflow):
        return None
    from tasks.core.tracking import tracking_uri

    cause = _database_error(error) or getattr(error, "orig", None) or error
    first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    if "readonly" in first:  # issue 82: a read-only mlflow.db ended on SQLAlchemy's autoflush hint
        return f"MLflow store {tracking_uri()}: is read-only ({first}); make it writable"
    hint = " (is the disk full, or the file damaged?)" if database else ""
    return f"MLflow store {tracking_uri()}: {first}{hint}"


def _database_error(error: BaseException) -> BaseException | None:
    """The database's own error (sqlite3's) under SQLAlchemy's and MLflow's wrappers, if there is one."""
    seen: list[BaseException] = []
    while error is not None and error not in seen:
        seen.append(error)
        if type(error).__module__ == "sqlite3":
            return error
        error = getattr(error, "orig", None) or error.__cause__ or error.__context__
    return None


def run_as_process(
    command: click.Command, args: list[str] | None = None, prog_name: str | None = None
) -> None:
    """Run ``command`` on ``args`` (default: sys.argv): a failed stage or bad input is one line on stderr and exit
    status 1, never a traceback; a usage error (an unknown option, a missing argument) is click's message and status 2."""
    signal.signal(signal.SIGTERM, _terminated)
    try:
        command(args, prog_name=prog_name, standalone_mode=False)
    except PrivharError as error:
        click.echo(printable(f"{ERROR_PREFIX}{error}"), err=True)
        sys.exit(1)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("privhar: interrupted", err=True)
        sys.exit(130)
    except Terminated as stopped:
        click.echo("privhar: terminated (SIGTERM)", err=True)
        sys.exit(stopped.code)
    except (
        OSError
    ) as error:  # a file-system fault the stage could not check up front: still one line
        where = f"{error.filename}: " if error.filename else ""
        click.echo(printable(f"{ERROR_PREFIX}{where}{error.strerror or error}"), err=True)
        sys.exit(1)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except Exception as error:
        problem = store_problem(error)
        if problem is None:
            raise
        click.echo(f"{ERROR_PREFIX}{problem}", err=True)
        sys.exit(1)
