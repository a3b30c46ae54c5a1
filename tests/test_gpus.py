"""The GPUs as data (``data/gpus/``): every fact sourced, the capacities the sources print, an
unknown GPU refused in one line, each release's scheduler defaults on each GPU held to the
release's own ``get_batch_defaults`` (run from its source), and the GPUs on which a release's
indexer path is not modelled refused with the reason."""
from __future__ import annotations

import ast
import enum
import importlib.util
import json
import os
from pathlib import Path

import pytest

from indexer_lib.checks import BadValue
from indexer_lib.cli.main import main
from indexer_lib.engines import get_engine, gpu_refusal, process_budget, release_scheduler, scheduler_defaults
from indexer_lib.notebook.params import ParameterError, check_values
from indexer_lib.plan import PlanSettings, get_strategy
from indexer_lib.refdata import data_path
from indexer_lib.presets import GIB, GPUS, MIB, GpuPreset, get_gpu
from indexer_lib.sweep.grid import Grid
from indexer_lib.sweep.rows import RunSettings, spec_of

REPO = Path(__file__).resolve().parent.parent
ENGINES = REPO / ".venv-engines"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
NAMES = ("h100", "h20", "h200", "b200", "b300", "gb10", "mi355x")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- the data

def test_every_gpu_file_loads_with_a_source_for_each_fact():
    files = sorted(data_path("gpus").glob("*.json"))
    assert {p.stem for p in files} == set(NAMES) == set(GPUS)
    for path in files:
        doc = json.loads(path.read_text())
        assert doc["gpu"] == path.stem and doc["what"]
        for name in ("capacity_bytes", "sm_count", "hbm_tbps", "compute_capability", "arch", "vendor",
                     "unified_memory"):
            fact = doc["facts"][name]
            assert set(fact) >= {"value", "source", "verified"}, (path.name, name)
            assert isinstance(fact["verified"], bool) and len(fact["source"]) > 10, (path.name, name)
        # what the preset says is what the file says, and the unverified facts are named
        g = get_gpu(path.stem)
        assert g.capacity_bytes == doc["facts"]["capacity_bytes"]["value"]
        assert g.unverified == tuple(n for n, f in doc["facts"].items() if not f["verified"])


@pytest.mark.parametrize("name, capacity, printed", [
    # torch prints total_memory in whole MiB; PyTorch's OOM message in GiB to two decimals
    ("h100", 81089 * MIB, "total_memory=81089MB"),
    ("h20", 97285 * MIB, "total_memory=97285MB"),
    ("h200", round(139.8 * GIB), "139.81 GiB"),  # the figure the project has always used
    ("b200", round(178.35 * GIB), "178.35 GiB"),
    ("b300", round(267.69 * GIB), "267.69 GiB"),
    ("gb10", 130602405888, "totalMem=130602405888"),
    ("mi355x", round(287.98 * GIB), "287.98 GiB"),
])
def test_capacities_are_the_numbers_their_sources_print(name, capacity, printed):
    g = get_gpu(name)
    assert g.capacity_bytes == capacity
    source = json.loads((data_path("gpus") / f"{name}.json").read_text())["facts"]["capacity_bytes"]["source"]
    assert printed in source


def test_the_h200_and_b200_capacities_are_unchanged():
    assert get_gpu("h200").capacity_bytes == round(139.8 * GIB) == 150109106995
    assert get_gpu("b200").capacity_bytes == round(178.35 * GIB) == 191501854310


def test_facts_a_time_model_reads_and_the_unverified_ones():
    expected = {"h100": (132, 3.35, "sm90"), "h20": (78, 4.0, "sm90"), "h200": (132, 4.8, "sm90"),
                "b200": (148, 8.0, "sm100"), "b300": (148, 8.0, "sm103"), "gb10": (48, 0.273, "sm121"),
                "mi355x": (256, 8.0, "gfx950")}
    for name, (sms, tbps, arch) in expected.items():
        g = get_gpu(name)
        assert isinstance(g.sm_count, int) and isinstance(g.hbm_tbps, float)
        assert (g.sm_count, g.hbm_tbps, g.arch) == (sms, tbps, arch)
    assert get_gpu("gb10").unified_memory and not get_gpu("h200").unified_memory
    assert [g.cuda_family for g in map(get_gpu, NAMES)] == [90, 90, 90, 100, 100, 120, None]
    # derived or unread figures say so
    assert get_gpu("mi355x").unverified == ("capacity_bytes",)
    assert "hbm_tbps" in get_gpu("h100").unverified and "hbm_tbps" in get_gpu("h20").unverified
    assert get_gpu("h200").unverified == ()


def test_gpu_names_as_people_write_them():
    assert get_gpu(" H200 ") is GPUS["h200"]
    assert get_gpu(GPUS["b300"]) is GPUS["b300"]
    assert isinstance(get_gpu("GB10"), GpuPreset)


# ----------------------------------------------------------------------------- refused input

def test_an_unknown_gpu_is_one_line_naming_it_and_the_choices(capsys):
    with pytest.raises(BadValue, match=r"unknown GPU 'a100': did you mean h100\?$"):
        get_gpu("a100")
    with pytest.raises(BadValue, match=r"unknown GPU 'tpu': must be one of b200, b300, gb10, h100, h20, h200, mi355x$"):
        get_gpu("tpu")
    for command in (["plan", "--query-lens", "8", "--seq-lens", "8"], ["run", "--query-lens", "8", "--seq-lens", "8"],
                    ["frontier", "--out", "x.csv"], ["auto", "--free-gib", "4", "--workload", "1x2048x64"],
                    ["replay", "--query-lens", "8", "--seq-lens", "8"]):
        code, out, err = run(capsys, *command, "--gpu", "a100")
        assert code == 2, command
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "unknown GPU 'a100': did you mean h100?" in err


@pytest.mark.parametrize("gpu, engine, why", [
    ("mi355x", "vllm==0.30.0", "its prefill chunk loop and workspace on ROCm were not read"),
    ("mi355x", "sglang==0.5.19", "were not read before 0.5.20"),
    ("mi355x", "vllm==0.19.0", "its ROCm indexer path was not read at this release"),
    ("b200", "vllm==0.33.0", "as_fp32_logits"),
    ("b300", "vllm==0.33.0", "as_fp32_logits"),
    ("gb10", "vllm==0.20.0", "runs DeepGEMM only on CUDA families 9.x, 10.x"),
    ("gb10", "vllm==0.15.1", "runs DeepGEMM only on CUDA families 9.x, 10.x"),
])
def test_a_gpu_on_which_the_release_path_is_not_modelled_is_refused(capsys, gpu, engine, why):
    assert why in gpu_refusal(engine, gpu)
    code, out, err = run(capsys, "plan", "--gpu", gpu, "--engine", engine, "--model", "glm-5",
                         "--query-lens", "4096", "--seq-lens", "65536", "--free-gib", "20")
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert f"GPU '{gpu}': not planned" in err and why in err
    with pytest.raises(BadValue, match="not planned"):
        PlanSettings("glm-5", engine, gpu=gpu)


@pytest.mark.parametrize("gpu, engine", [
    ("h100", "vllm"), ("h20", "vllm"), ("h200", "vllm"), ("gb10", "vllm"), ("gb10", "vllm==0.30.0"),
    ("b200", "vllm==0.30.0"), ("b300", "vllm==0.19.0"), ("b200", "sglang"), ("gb10", "sglang"),
    ("mi355x", "vllm"), ("mi355x", "sglang"), ("mi355x", "sglang==0.5.20"),
])
def test_the_modelled_paths_plan_on_every_gpu(capsys, gpu, engine):
    assert gpu_refusal(engine, gpu) is None
    code, out, err = run(capsys, "plan", "--gpu", gpu.upper(), "--engine", engine, "--model", "glm-5",
                         "--query-lens", "4096", "--seq-lens", "65536", "--free-gib", "20", "--json")
    assert code == 0, err
    assert json.loads(out)["gpu"] == gpu.upper()  # the key plan --json always had: the GPU as given


def test_sglang_budget_is_capped_from_the_gpus_total_memory():
    """SGLang's budget: min(free x 0.2, total x (1 - mem_fraction_static) x 0.2, total x 0.3); with
    much memory free, the total's term binds, so each GPU gives its own budget."""
    free_gib = 120.0
    for name in ("h100", "h200", "b200", "b300", "gb10"):
        settings = PlanSettings("glm-5", "sglang", gpu=name, temporaries="deepgemm")
        budget = get_strategy("engine").budget_bytes(None, free_gib, settings)
        total = get_gpu(name).capacity_bytes
        assert budget == process_budget("sglang", int(free_gib * GIB), total)
        assert budget == min(int(free_gib * GIB * 0.2), int(int(total * (1 - 0.9)) * 0.2), int(0.3 * total))
    budgets = {n: get_strategy("engine").budget_bytes(None, free_gib, PlanSettings("glm-5", "sglang", gpu=n))
               for n in ("h100", "b300")}
    assert budgets["h100"] < budgets["b300"]


# ----------------------------------------------------------------------------- scheduler defaults

class _UsageContext(enum.Enum):
    UNKNOWN_CONTEXT = "UNKNOWN_CONTEXT"
    LLM_CLASS = "LLM_CLASS"
    API_SERVER = "API_SERVER"
    OPENAI_API_SERVER = "OPENAI_API_SERVER"
    OPENAI_BATCH_RUNNER = "OPENAI_BATCH_RUNNER"
    ENGINE_CONTEXT = "ENGINE_CONTEXT"


class _Platform:
    """What ``get_batch_defaults`` asks the platform, answered for one GPU of data/gpus/ (its total
    as torch reports it: the engines read NVML's, a few hundred MiB more, far from any threshold)."""

    def __init__(self, gpu: GpuPreset):
        self.gpu = gpu

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return self.gpu.capacity_bytes

    def get_device_name(self, device_id: int = 0) -> str:
        return f"NVIDIA {self.gpu.name.upper()}"

    def is_device_capability(self, capability, device_id: int = 0) -> bool:
        major, minor = capability if isinstance(capability, tuple) else divmod(capability, 10)
        return self.gpu.arch == f"sm{major}{minor}"

    def __getattr__(self, name):  # is_tpu, is_cpu, is_xpu ...: a CUDA GPU
        return lambda *args, **kwargs: False


def _arg_utils(release: str) -> Path:
    if release == "0.33.0":
        spec = importlib.util.find_spec("vllm")
        path = None if spec is None else Path(spec.origin).parent / "engine" / "arg_utils.py"
    else:
        path = next((ENGINES / f"vllm-{release}").glob("**/vllm/engine/arg_utils.py"), None)
    if path is None or not path.exists():
        message = f"vllm {release} is not installed here: bash scripts/install_engines.sh"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


def release_batch_defaults(release: str, gpu: GpuPreset) -> tuple[int, int]:
    """The release's own ``EngineArgs.get_batch_defaults`` run from its source on ``gpu``: the
    OpenAI server's (max_num_batched_tokens, max_num_seqs)."""
    path = _arg_utils(release)
    tree = ast.parse(path.read_text())
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "get_batch_defaults")
    fn.decorator_list = []
    fn.body = [s for s in fn.body if not isinstance(s, ast.ImportFrom)]  # UsageContext: given below
    namespace = {"current_platform": _Platform(gpu), "GiB_bytes": 1 << 30, "UsageContext": _UsageContext}
    exec(compile(ast.fix_missing_locations(ast.Module([fn], [])), str(path), "exec"), namespace)
    tokens, seqs = namespace["get_batch_defaults"](None, world_size=1)
    return tokens[_UsageContext.OPENAI_API_SERVER], seqs[_UsageContext.OPENAI_API_SERVER]


@pytest.mark.parametrize("release", ["0.15.1", "0.19.0", "0.20.0", "0.30.0", "0.33.0"])
@pytest.mark.parametrize("gpu", [g for g in NAMES if g != "mi355x"])
def test_vllm_scheduler_defaults_per_gpu_are_the_releases_own(release, gpu):
    d = scheduler_defaults(f"vllm=={release}", gpu)
    assert (d["max_num_batched_tokens"], d["max_num_seqs"]) == release_batch_defaults(release, get_gpu(gpu))


def test_vllm_scheduler_defaults_by_gpu_restated():
    """The tiers as the releases state them (OpenAI server): >= 160 GiB from 0.30.0; a GB10 on the
    small tier from 0.33.0."""
    table = {"vllm==0.15.1": {"h100": 8192, "h200": 8192, "b200": 8192, "gb10": 8192},
             "vllm==0.30.0": {"h100": 8192, "h200": 8192, "b200": 16384, "b300": 16384, "gb10": 8192},
             "vllm==0.33.0": {"h100": 8192, "h20": 8192, "h200": 8192, "b200": 16384, "b300": 16384, "gb10": 2048}}
    for engine, by_gpu in table.items():
        for gpu, tokens in by_gpu.items():
            assert scheduler_defaults(engine, gpu)["max_num_batched_tokens"] == tokens, (engine, gpu)
    assert scheduler_defaults("vllm==0.33.0", "gb10")["max_num_seqs"] == 256
    # no GPU: the profiles' own figures, which are an H200's
    for engine in ("vllm==0.11.0", "vllm==0.19.0", "vllm", "sglang==0.5.3", "sglang"):
        assert scheduler_defaults(engine) == scheduler_defaults(engine, "h200")


def test_sglang_chunked_prefill_size_by_gpu_memory():
    """SGLang 0.5.23 arg_groups/memory_hook.py _handle_gpu_memory_settings: 8192 below 160 GiB,
    16384 above; max_running_requests does not depend on the GPU."""
    expected = {"h100": 8192, "h20": 8192, "h200": 8192, "gb10": 8192, "b200": 16384, "b300": 16384}
    for engine in ("sglang==0.5.3", "sglang==0.5.6", "sglang"):
        for gpu, tokens in expected.items():
            d = scheduler_defaults(engine, gpu)
            assert d["max_num_batched_tokens"] == tokens and d["max_num_seqs"] == 2048
    source = next(ENGINES.glob("sglang-0.5.23/**/srt/arg_groups/memory_hook.py"), None)
    if source is not None:  # the tiers as the release writes them
        text = source.read_text()
        assert "elif gpu_mem < 160 * 1024:" in text and "chunked_prefill_size=16384" in text


def test_release_scheduler_and_grid_take_the_gpu():
    assert release_scheduler("vllm", 64, "b200").max_num_batched_tokens == 16384
    assert release_scheduler("vllm", 64, "b200", max_num_batched_tokens=4096).max_num_batched_tokens == 4096
    grid = Grid.of(model="glm-5", engine=("sglang",), gpu="B300", concurrency=(1,), isl=(4096,))
    assert grid.gpu == "b300"
    assert {c.max_num_batched_tokens for c in grid.schedulers(grid.engine[0])} == {16384}
    assert grid.not_default() == ""  # the release's own defaults on that GPU
    assert grid.settings(grid.engine[0]).gpu == "b300"
    with pytest.raises(BadValue, match="unknown GPU 'x'"):
        Grid.of(model="glm-5", gpu="x")
    with pytest.raises(BadValue, match="not planned"):
        Grid.of(model="glm-5", engine=("vllm==0.30.0",), gpu="mi355x")
    # the default GPU leaves a sweep's journal key as it was; another GPU is part of it
    settings = RunSettings(mode="model")
    assert "gpu" not in spec_of(Grid.of(model="glm-5"), settings)
    assert spec_of(grid, settings)["gpu"] == "b300"


def test_frontier_and_auto_on_another_gpu(capsys, tmp_path):
    out = tmp_path / "f.csv"
    code, stdout, err = run(capsys, "frontier", "--model", "glm-5", "--engine", "sglang", "--gpu", "b200",
                            "--concurrency", "1", "--isl", "4096", "--strategy", "engine", "--free-gib", "20",
                            "--out", str(out))
    assert code == 0, err
    assert out.exists()
    code, stdout, err = run(capsys, "auto", "--engine", "sglang", "--gpu", "b200", "--free-gib", "20",
                            "--workload", "1x4096x64", "--json")
    assert json.loads(stdout)["gpu"] == "b200" and json.loads(stdout)["scheduler_not_default"] == ""


def test_notebook_parameters_take_a_gpu():
    params = check_values("03_strategies", {"gpu": "b200", "engine": "sglang"})
    assert params.settings().gpu == "b200"
    assert params.scheduler().max_num_batched_tokens == 16384
    with pytest.raises(ParameterError, match=r"03_strategies.ipynb parameter 'gpu': unknown GPU 'h300'"):
        check_values("03_strategies", {"gpu": "h300"})
    with pytest.raises(ParameterError, match=r"'gpu': GPU 'mi355x': not planned"):
        check_values("01_oom_frontier", {"gpu": "mi355x", "engine": "vllm==0.30.0"})


def test_plan_names_the_gpu_and_its_unverified_facts(capsys):
    code, out, err = run(capsys, "plan", "--gpu", "h100", "--model", "glm-5", "--query-lens", "4096",
                         "--seq-lens", "65536")
    assert code == 0 and "GPU h100 (sm90): 79.19 GiB as torch reports it (data/gpus/h100.json)\n" in out
    code, out, err = run(capsys, "plan", "--gpu", "h20", "--model", "glm-5", "--query-lens", "4096",
                         "--seq-lens", "65536", "--json")
    assert json.loads(out)["gpu_unverified"] == ["hbm_tbps"]
    code, out, err = run(capsys, "plan", "--model", "glm-5", "--query-lens", "4096", "--seq-lens", "65536")
    assert "GPU " not in out  # the default H200: as before
