"""The command line: help lists the commands; a user error is one line and exit status 2."""

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import write_params

PRIVHAR = str(Path(sys.executable).parent / "privhar")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PRIVHAR, *args], cwd=cwd, capture_output=True, text=True, env=dict(os.environ), timeout=300
    )


def test_help_lists_commands():
    result = run("--help")
    assert result.returncode == 0
    for command in ("flow", "stage"):
        assert command in result.stdout
    stages = run("stage", "--help").stdout
    for name in ("synthesize", "decode", "train", "evaluate"):
        assert name in stages


def test_a_stage_commands_options_are_its_functions_arguments():
    """privhar stage dprp's options: --params and --budget of the command layer, then the stage function's own, built
    from its signature (tasks/core/stage_options.py); listing the stages or scan's options imports no torch."""
    from click.testing import CliRunner

    from flows.stage_commands import stage, stage_command

    dprp = stage_command("dprp")
    assert [option.opts[0] for option in dprp.params] == [
        "--params",
        "--budget",
        "--frames",
        "--epsilon",
        "--out",
        "--report",
        "--speed",
    ]
    assert [option.name for option in dprp.params if option.required] == [
        "frames",
        "epsilon",
        "out",
    ]
    assert "Total ε (one of dprp.epsilons)." in CliRunner().invoke(stage, ["dprp", "--help"]).output
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from flows.stage_commands import stage, stage_command; "
            "stage_command('scan'); stage.list_commands(None); print('torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout.strip() == "False"


def test_bad_param_is_one_line_without_traceback(tmp_path):
    params = write_params(tmp_path, {"decode": {"fps": 0.0}})
    (tmp_path / "source").mkdir()
    result = run(
        "stage",
        "decode",
        "--params",
        str(params),
        "--source",
        str(tmp_path / "source"),
        "--out",
        str(tmp_path / "out"),
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"privhar: error: {params}: decode.fps = 0.0 is invalid: input should be greater than 0"
    ]
    assert not (tmp_path / "out").exists()


def test_flow_outside_a_project_is_one_line(tmp_path):
    result = run("flow", cwd=tmp_path)
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == f"privhar: error: {tmp_path}: no dvc.yaml here (run privhar from the project folder)"
    )


def test_version_and_usage_errors():
    """Issue 20: `privhar --version`; a usage error is click's status 2, a failed stage status 1."""
    from importlib.metadata import version

    shown = run("--version")
    assert (
        shown.returncode == 0 and shown.stdout.strip() == f"privhar, version {version('privhar')}"
    )
    usage = run("stage", "train")
    assert usage.returncode == 2 and "Missing option" in usage.stderr


def test_serve_stop_and_ui_stop_as_subcommand_words(tmp_path):
    """`privhar serve stop` as `prefect server stop`; nothing running here, so each says so."""
    served = run("serve", "stop", cwd=tmp_path)
    assert served.returncode == 0 and served.stderr.strip() == "privhar: nothing was serving"
    ui = run("ui", "stop", cwd=tmp_path)
    assert (
        ui.returncode == 0
        and ui.stderr.strip() == "privhar: no MLflow UI of this project was running"
    )


def test_a_port_outside_1_to_65535_is_a_usage_error(tmp_path):
    """`--port 0` silently served on the default port; 70000 failed later, unclearly (issue 35)."""
    write_params(tmp_path)
    for command in ("ui", "serve"):
        for port in ("0", "70000"):
            result = run(command, "--port", port, cwd=tmp_path)
            assert (
                result.returncode == 2
                and f"{port} is not in the range 1<=x<=65535" in result.stderr
            )


def test_serve_checks_its_schedule_before_it_starts_a_server(tmp_path):
    params = write_params(tmp_path, {"orchestrate": {"timezone": "Mars/Base"}})
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    result = run("serve", cwd=tmp_path)
    assert result.returncode == 1 and result.stderr.strip() == (
        "privhar: error: params.yaml: orchestrate.timezone = 'Mars/Base' is invalid: expected an IANA time zone "
        "such as UTC or Europe/Berlin"
    )
    # no server was started (importing Prefect to check the cron creates its home folder, nothing more)
    assert not any(
        (tmp_path / ".prefect" / name).exists()
        for name in ("server.pid", "server.log", "serve.pid")
    )
    assert params.exists()


def test_flow_checks_every_params_section_before_the_first_stage(tmp_path):
    """A typo in the last stages' sections was found by their own command line, after the others ran (issue 35)."""
    from tests.conftest import REPO

    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text())
    for overrides, message in (
        ({"report": {"seeds": 0}}, "report.seeds = 0 is invalid: input should be greater than 0"),
        ({"private": {"methods": ["dp_sdg"]}}, "private.methods.0 = 'dp_sdg' is invalid"),
    ):
        params = write_params(tmp_path, overrides)
        result = run("flow", cwd=tmp_path)
        assert result.returncode == 1 and "Running stage" not in result.stdout
        assert result.stderr.startswith(f"privhar: error: {params}: {message}")
        assert result.stderr.count("\n") == 1


def test_an_audit_too_small_to_show_anything_is_refused_before_any_work(tmp_path):
    """`audit_canaries: 1` passed the preflight; four stages then failed after their work with `need 0 <= v <= r <= m`
    (issue 82). 18 canaries are the fewest with which the audit's largest guess plan, every guess right, rejects
    ε = 0 at 95 % (2⁻⁷ < 0.05 / 6)."""
    from tests.conftest import REPO

    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text())
    write_params(tmp_path, {"private": {"audit_canaries": 1}})
    result = run("flow", cwd=tmp_path)
    assert result.returncode == 1 and "Running stage" not in result.stdout
    assert result.stderr == (
        "privhar: error: private.audit_canaries = 1: a one-run audit at 95% confidence needs at least 18 canaries "
        "to show any ε̂ above 0 (every guess right); 0 turns the audit off\n"
    )
    write_params(tmp_path, {"dprp": {"audit_frames": 17}})
    (tmp_path / "data/decode").mkdir(parents=True)
    argv = ["--frames", "data/decode", "--epsilon", "1", "--out", "o", "--report", "r"]
    result = run("stage", "dprp", *argv, cwd=tmp_path)
    assert result.returncode == 1 and result.stderr.startswith(
        "privhar: error: dprp.audit_frames = 17: a one-run audit"
    ), result.stderr


def test_flow_refuses_a_stage_dvc_yaml_lacks_and_a_damaged_lock_before_any_server(tmp_path):
    """Both were found 47-62 s in, after a temporary Prefect server and a failed MLflow parent run (issue 82)."""
    from tests.conftest import REPO

    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text())
    write_params(tmp_path)
    subprocess.run(
        [Path(PRIVHAR).with_name("dvc"), "init", "--no-scm", "-q"], cwd=tmp_path, check=True
    )
    result = run("flow", "nosuchstage", cwd=tmp_path)
    assert result.returncode == 1 and result.stderr.startswith(
        "privhar: error: privhar flow: no stage 'nosuchstage' in dvc.yaml (stages: code, scan,"
    ), result.stderr
    (tmp_path / "dvc.lock").write_text('schema: "2.0"\nstages:\n  scan: [unclosed\n')
    result = run("flow", cwd=tmp_path)
    assert result.returncode == 1 and "dvc.lock" in result.stderr and result.stderr.count("\n") == 1
    assert (
        not (tmp_path / ".prefect" / "server.pid").exists()
        and not (tmp_path / "mlflow.db").exists()
    )


def test_plots_outside_a_project_says_so(tmp_path):
    """Issue 82: it asked for an npm install."""
    result = run("plots", cwd=tmp_path)
    assert result.returncode == 1 and result.stderr == (
        f"privhar: error: {tmp_path.resolve()}: no dvc.yaml here (run privhar from the project folder)\n"
    )
