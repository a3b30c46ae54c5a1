"""The project's set-up files agree with each other."""
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~\[ ;]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def conda_pip_names() -> set[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_part = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert "-e ." in pip_part, "environment.yml must install this package"
    return {requirement_name(s) for s in pip_part if not s.startswith("-")}


def test_environment_yml_lists_every_dependency_of_pyproject():
    project = pyproject()["project"]
    wanted = {requirement_name(s) for s in project["dependencies"]}
    for extra in ("test", "notebooks"):
        wanted |= {requirement_name(s) for s in project["optional-dependencies"][extra]}
    names = conda_pip_names()
    assert wanted - names == set(), "missing from environment.yml"
    assert names - wanted == set(), "in environment.yml but not in pyproject.toml"


def test_environment_yml_pins_the_cpu_torch_the_scripts_install():
    env_text = (ROOT / "environment.yml").read_text()
    setup = (ROOT / "scripts" / "setup_env.sh").read_text()
    pin = re.search(r"torch==([\d.]+)", setup).group(1)
    assert f"torch=={pin}" in env_text


def test_readme_gives_exactly_two_setup_commands_and_ci_runs_the_test_one():
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    commands = [line for line in first_block.splitlines() if line.strip()]
    assert len(commands) == 2, commands
    main_cmd, test_cmd = (c.split("#")[0].strip() for c in commands)
    assert (ROOT / main_cmd.split()[-1]).exists()
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd.replace("bash ", "") in ci


def test_console_script_points_at_the_cli():
    assert pyproject()["project"]["scripts"]["indexer-lab"] == "indexer_lib.cli:main"
