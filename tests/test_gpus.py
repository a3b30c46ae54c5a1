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
import re
from pathlib import Path
from types import SimpleNamespace

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
NAMES = ("h100", "h20", "h200", "b200", "b300", "gb200", "gb300", "gb10", "rtx-pro-6000", "a100", "l40s", "mi300x",
         "mi325x", "mi355x")
AMD = ("mi300x", "mi325x", "mi355x")


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
    ("gb200", round(184.31 * GIB), "184.31 GiB"),
    ("gb300", round(276.50 * GIB), "276.50 GiB"),
    ("rtx-pro-6000", 97250 * MIB, "total_memory=97250MB"),
    ("a100", round(79.15 * GIB), "79.15 GB"),  # a CUDA device query that prints GiB as GB
    ("l40s", 45589 * MIB, "total_memory=45589MB"),
    ("mi300x", 196592 * MIB, "total_memory=196592MB"),
    ("mi325x", 262128 * MIB, "255.98 GiB"),
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
                "mi355x": (256, 8.0, "gfx950"), "gb200": (152, 8.0, "sm100"), "gb300": (160, 8.0, "sm103"),
                "rtx-pro-6000": (188, 1.792, "sm120"), "a100": (108, 2.039, "sm80"), "l40s": (142, 0.864, "sm89"),
                "mi300x": (304, 5.3, "gfx942"), "mi325x": (304, 6.0, "gfx942")}
    for name, (sms, tbps, arch) in expected.items():
        g = get_gpu(name)
        assert isinstance(g.sm_count, int) and isinstance(g.hbm_tbps, float)
        assert (g.sm_count, g.hbm_tbps, g.arch) == (sms, tbps, arch)
    assert get_gpu("gb10").unified_memory and not get_gpu("h200").unified_memory
    assert [g.cuda_family for g in map(get_gpu, NAMES)] == [90, 90, 90, 100, 100, 100, 100, 120, 120, 80, 80,
                                                            None, None, None]
    assert [get_gpu(n).cuda_major for n in ("a100", "l40s", "h200", "gb300", "rtx-pro-6000", "mi300x")] == [
        8, 8, 9, 10, 12, None]
    # derived or unread figures say so
    assert get_gpu("mi355x").unverified == ("capacity_bytes",)
    assert "hbm_tbps" in get_gpu("h100").unverified and "hbm_tbps" in get_gpu("h20").unverified
    assert get_gpu("h200").unverified == ()
    # derived from a sibling part or a rack figure, and said so in the file's note
    assert get_gpu("mi325x").unverified == ("capacity_bytes",)
    assert get_gpu("gb300").unverified == ("capacity_bytes", "sm_count")
    assert get_gpu("gb200").unverified == get_gpu("rtx-pro-6000").unverified == get_gpu("l40s").unverified == ()
    for name in NAMES:
        facts = json.loads((data_path("gpus") / f"{name}.json").read_text())["facts"]
        assert all(facts[u].get("note") for u in get_gpu(name).unverified), name


def test_gpu_names_as_people_write_them():
    assert get_gpu(" H200 ") is GPUS["h200"]
    assert get_gpu(GPUS["b300"]) is GPUS["b300"]
    assert isinstance(get_gpu("GB10"), GpuPreset)
    # the vendor, the board, the rack and the memory size do not change which GPU it is
    for given, name in [("gb-200", "gb200"), ("GB200 NVL72", "gb200"), ("NVIDIA GB300", "gb300"),
                        ("RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"), ("rtx pro 6000", "rtx-pro-6000"),
                        ("A100-SXM4-80GB", "a100"), ("NVIDIA L40S", "l40s"), ("AMD Instinct MI300X", "mi300x"),
                        ("H100 80GB HBM3", "h100"), ("mi-325x", "mi325x")]:
        assert get_gpu(given).name == name, given


@pytest.mark.parametrize("given, nearest", [
    ("rtx6000", "did you mean rtx-pro-6000?"),  # the RTX 6000 Ada is another GPU: not taken for it
    ("mi355", "did you mean mi355x or mi325x?"),
    ("gb100", "did you mean gb10, gb300 or gb200?"),
    ("a10", "did you mean a100?"),
])
def test_a_misspelt_gpu_is_refused_with_the_nearest(capsys, given, nearest):
    with pytest.raises(BadValue, match=rf"^unknown GPU '{given}': {re.escape(nearest)}$"):
        get_gpu(given)
    code, out, err = run(capsys, "plan", "--gpu", given, "--query-lens", "8", "--seq-lens", "8")
    assert code == 2 and err.count("\n") == 1 and nearest in err


# ----------------------------------------------------------------------------- refused input

def test_an_unknown_gpu_is_one_line_naming_it_and_the_choices(capsys):
    with pytest.raises(BadValue, match=r"unknown GPU 'h300': did you mean h200, h100 or b300\?$"):
        get_gpu("h300")
    with pytest.raises(BadValue, match=r"unknown GPU 'tpu': must be one of a100, b200, b300, gb10, gb200, gb300, h100, "
                                       r"h20, h200, l40s, mi300x, mi325x, mi355x, rtx-pro-6000$"):
        get_gpu("tpu")
    for command in (["plan", "--query-lens", "8", "--seq-lens", "8"], ["run", "--query-lens", "8", "--seq-lens", "8"],
                    ["frontier", "--out", "x.csv"], ["auto", "--free-gib", "4", "--workload", "1x2048x64"],
                    ["replay", "--query-lens", "8", "--seq-lens", "8"]):
        code, out, err = run(capsys, *command, "--gpu", "h300")
        assert code == 2, command
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "unknown GPU 'h300': did you mean h200, h100 or b300?" in err


@pytest.mark.parametrize("gpu, engine, why", [
    ("mi355x", "vllm==0.30.0", "its prefill chunk loop and workspace on ROCm were not read"),
    ("mi355x", "sglang==0.5.12", "its ROCm indexer path was not read at this release"),
    ("mi355x", "vllm==0.19.0", "its ROCm indexer path was not read at this release"),
    ("mi300x", "vllm==0.30.0", "its prefill chunk loop and workspace on ROCm were not read"),
    ("mi325x", "vllm==0.19.0", "its ROCm indexer path was not read at this release"),
    # vLLM before 0.30.0 has no sparse-MLA attention backend on capability 12.x: it stops at startup
    ("gb10", "vllm==0.20.0", "flashmla_sparse.py:133 (major 9 or 10)"),
    ("gb10", "vllm==0.15.1", "platforms/cuda.py:351-352 raises 'No valid attention backend found'"),
    ("rtx-pro-6000", "vllm==0.19.0", "no indexer path for these models on compute capability 12.x"),
    ("rtx-pro-6000", "trtllm", "runs DeepGEMM only on CUDA families 9.x, 10.x"),
    # no sparse-MLA backend and no DeepGEMM below capability 9: each engine's own reason
    ("a100", "vllm", "platforms/cuda.py:472-473 raises 'No valid attention backend found'"),
    ("a100", "vllm==0.20.0", "platforms/cuda.py:332-333"),
    ("l40s", "vllm==0.30.0", "no indexer path for these models on compute capability 8.x (l40s, sm89)"),
    ("a100", "sglang", "configurer.py:39 turns DeepGEMM off below sm90"),
    ("l40s", "sglang==0.5.3", "configurer.py:39 turns DeepGEMM off below sm90"),
    ("a100", "trtllm", "runs DeepGEMM only on CUDA families 9.x, 10.x"),
    ("l40s", "trtllm==1.3.0rc27", "runs DeepGEMM only on CUDA families 9.x, 10.x"),
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
    # sm120: DeepGEMM's fp32 logits from vllm 0.30.0 (support_deep_gemm family 12.x, FLASHINFER_MLA_SPARSE_SM120)
    ("rtx-pro-6000", "vllm"), ("rtx-pro-6000", "vllm==0.30.0"), ("rtx-pro-6000", "sglang"),
    ("gb200", "vllm==0.30.0"), ("gb200", "sglang"), ("gb300", "vllm==0.20.0"), ("gb300", "sglang"),
    ("gb200", "trtllm"),
    ("b200", "vllm==0.33.0"), ("b300", "vllm==0.33.0"), ("gb200", "vllm==0.33.0"), ("gb300", "vllm==0.33.0"),
    ("mi355x", "vllm"), ("mi355x", "sglang"), ("mi355x", "sglang==0.5.20"), ("mi300x", "sglang"), ("mi325x", "sglang"),
    ("mi300x", "vllm==0.33.0"), ("mi325x", "vllm"),
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
@pytest.mark.parametrize("gpu", [g for g in NAMES if g not in AMD])
def test_vllm_scheduler_defaults_per_gpu_are_the_releases_own(release, gpu):
    d = scheduler_defaults(f"vllm=={release}", gpu)
    assert (d["max_num_batched_tokens"], d["max_num_seqs"]) == release_batch_defaults(release, get_gpu(gpu))


def release_sparse_mla_majors(release: str) -> set[int]:
    """The compute-capability majors some sparse-MLA attention backend of the release accepts: each
    ``supports_compute_capability`` of its v1/attention/backends/mla/*sparse*.py, run from its source
    for majors 7 to 13 (a GPU none accepts stops at startup: 'No valid attention backend found')."""
    folder = _arg_utils(release).parent.parent / "v1" / "attention" / "backends" / "mla"
    majors = set()
    for path in sorted(folder.glob("*sparse*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "supports_compute_capability":
                node.decorator_list, node.returns = [], None
                for arg in node.args.args:
                    arg.annotation = None
                namespace = {}
                exec(compile(ast.fix_missing_locations(ast.Module([node], [])), str(path), "exec"), namespace)
                accepts = namespace[node.name]
                majors |= {m for m in range(7, 14) if accepts(None, SimpleNamespace(major=m, minor=0))}
    return majors


@pytest.mark.parametrize("release", ["0.15.1", "0.19.0", "0.20.0", "0.30.0", "0.33.0"])
def test_vllm_indexer_cuda_majors_are_its_sparse_mla_backends_own(release):
    assert set(get_engine(f"vllm=={release}").indexer_cuda_majors) == release_sparse_mla_majors(release)


def test_vllm_scheduler_defaults_by_gpu_restated():
    """The tiers as the releases state them (OpenAI server): >= 160 GiB from 0.30.0; a GB10 on the
    small tier from 0.33.0."""
    table = {"vllm==0.15.1": {"h100": 8192, "h200": 8192, "b200": 8192, "gb10": 8192},
             "vllm==0.30.0": {"h100": 8192, "h200": 8192, "b200": 16384, "b300": 16384, "gb10": 8192},
             "vllm==0.33.0": {"h100": 8192, "h20": 8192, "h200": 8192, "b200": 16384, "b300": 16384, "gb10": 2048,
                              "gb200": 16384, "gb300": 16384, "rtx-pro-6000": 8192, "l40s": 2048,
                              "a100": 2048}}  # an A100 is left out of the middle tier by name
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


# ----------------------------------------------------------------------------- every entry

def test_every_gpu_is_reachable_from_every_entry(capsys):
    """The command line's --gpu, a sweep's grid, the notebooks' parameters and the dashboard's GPU
    drop-down all read data/gpus/: a new file is a choice everywhere, planned or refused with why."""
    from indexer_lib.notebook.widgets import FrontierDashboard

    code, out, err = run(capsys, "plan", "--help")
    assert code == 0 and f"one of {', '.join(GPUS)} (default h200" in " ".join(out.split())
    dash = FrontierDashboard(Grid.of(concurrency=(1,), isl=(2048,), strategy=("vllm",)), budget_mb=512)
    assert list(dash.controls["gpu"].options) == sorted(NAMES)
    for name in NAMES:
        why = gpu_refusal("sglang", name)
        if why is None:
            assert Grid.of(model="glm-5", engine=("sglang",), gpu=name.upper()).gpu == name
            assert check_values("03_strategies", {"gpu": name, "engine": "sglang"}).settings().gpu == name
        else:
            with pytest.raises(BadValue, match="not planned"):
                Grid.of(model="glm-5", engine=("sglang",), gpu=name)
            with pytest.raises(ParameterError, match=rf"'gpu': GPU '{re.escape(name)}': not planned"):
                check_values("03_strategies", {"gpu": name, "engine": "sglang"})
    dash.controls["gpu"].value = "l40s"  # refused: the status line says why, the last figure is kept
    assert "cannot compute" in dash.status.value and "platforms/cuda.py:472-473" in dash.status.value


def test_sglang_indexer_cuda_majors_restated_from_its_source():
    """SGLang 0.5.23: DeepGEMM off below sm90, and the DSA indexer's only CUDA scorer is DeepGEMM's
    (its torch scorer behind an environment variable)."""
    root = next(ENGINES.glob("sglang-0.5.23/**/sglang/srt"), None)
    if root is None:
        pytest.skip("sglang 0.5.23 is not installed here: bash scripts/install_engines.sh")
    configurer = (root / "layers/deep_gemm_wrapper/configurer.py").read_text().splitlines()
    assert "sm_version < 90" in configurer[38]
    resolve = (root / "layers/attention/dsa/utils.py").read_text().splitlines()[498:504]
    assert "def resolve_fp8_mqa_logits_fn" in resolve[0] and "return deep_gemm.fp8_mqa_logits" in resolve[-1]
    assert get_engine("sglang").indexer_cuda_majors == (9, 10, 12)


def test_the_design_docs_gpu_table_lists_what_each_engine_plans_there():
    """docs/design.md's GPU table names, per GPU, the releases of each engine planned there for the
    DSA models, as ``planned_on`` computes them from the refusal rules; every GPU has a row."""
    from indexer_lib.engines import planned_on
    from indexer_lib.presets import get_model

    text = (Path(__file__).resolve().parents[1] / "docs/design.md").read_text()
    start = text.index("| GPU | arch | capacity")
    rows = text[start:text.index("\n\n", start)].splitlines()
    assert rows[0].rstrip(" |").endswith("vLLM | SGLang | TensorRT-LLM | ATOM")
    seen = set()
    for row in rows[2:]:
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        gpu = cells[0].split()[0]
        seen.add(gpu)
        want = planned_on(gpu, get_model("glm-5"))
        assert planned_on(gpu, get_model("deepseek-v3.2")) == want
        for engine, cell in zip(("vllm", "sglang", "trtllm", "atom"), cells[5:]):
            assert cell == ("refused" if want[engine] is None else want[engine].split("==")[1]), (gpu, engine)
    assert seen == set(GPUS)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "atom"])
def test_each_engines_latest_release_plans_on_every_gpu_or_says_why_in_one_line(capsys, engine):
    """Every GPU of data/gpus/ with the engine's latest release: a plan, or one line naming the
    engine's reason (exit 2), never a traceback; which of the two follows gpu_refusal."""
    for gpu in GPUS:
        code = main(["plan", "--model", "glm-5", "--engine", engine, "--gpu", gpu, "--query-lens", "4096",
                     "--seq-lens", "32768", "--free-gib", "10"])
        out, err = capsys.readouterr()
        if gpu_refusal(engine, gpu) is None:
            assert code == 0 and out.startswith("engine on "), (gpu, err)
        else:
            assert code == 2 and out == "" and err.count("\n") == 1 and "not planned" in err, (gpu, err)
