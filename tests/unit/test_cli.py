"""The CLI's offline commands: show, graph, errors with hints (no root needed)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def twin(*args, cwd=ROOT, env=None):
    return subprocess.run([sys.executable, "-c", "from twin.cli import main; main()", *args],
                          capture_output=True, text=True, cwd=cwd, env=env)


def test_show_prints_nodes_links_addresses_asns():
    result = twin("lab", "show", "rail4")
    assert result.returncode == 0, result.stderr
    assert "superspine-1" in result.stdout and "AS 65000" in result.stdout
    assert "leaf-g1-r1:hs-g1h1 10.1.0.0/31  --  host-g1-h1:nic1 10.1.0.1/31" in result.stdout


def test_show_json():
    import json
    result = twin("lab", "show", "mini", "--json")
    data = json.loads(result.stdout)
    assert len(data["nodes"]) == 8 and len(data["links"]) == 8


def test_show_finds_a_running_lab_by_name_whatever_file_it_came_from(tmp_path, run_dir):
    import json
    import os

    from twin.lab.handle import LabPaths
    from twin.lab.state import LabState
    from twin.model import serialize
    from twin.model.build import build_fabric
    from twin.spec.labfile import load_lab
    copy = tmp_path / "gone.yaml"
    copy.write_text((ROOT / "labs" / "mini.yaml").read_text().replace("name: mini", "name: elsewhere"))
    state = LabState(lab="elsewhere", runtime="netns", lab_file=str(copy), status="up")
    state.save()  # the lab's saved model, as `up` keeps it: not in labs/, and its file since gone
    serialize.save(build_fabric(load_lab(copy, ["netns"])), LabPaths(state.directory).model)
    copy.unlink()
    result = twin("lab", "show", "elsewhere", "--json", env={**os.environ, "FABRIC_TWIN_RUN_DIR": str(run_dir)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["name"] == "elsewhere"


def test_probe_plan_lists_what_no_probe_tells_apart():
    """On paper, no lab up: mini's two leaves leave each spine's two links indistinguishable;
    rail4's plan tells every link and switch apart."""
    import json
    mini = json.loads(twin("probe", "mini", "--plan", "--json").stdout)
    assert sorted(mini["ambiguous"]) == [["spine-1 -- leaf-g1-r1", "spine-1 -- leaf-g2-r1"],
                                         ["spine-2 -- leaf-g1-r1", "spine-2 -- leaf-g2-r1"]]
    rail4 = twin("probe", str(ROOT / "labs" / "rail4.yaml"), "--plan")
    assert rail4.returncode == 0 and "tells every single lossy link or switch apart" in rail4.stdout
    refused = twin("probe", "mini", "--plan", "--pairs", "full")
    assert refused.returncode != 0 and "not pairs: full" in refused.stderr + refused.stdout


def test_probe_plan_says_whether_a_run_would_be_refused_at_max_pps():
    """mini's plan at 100 ms: the selection and its paced flows send 280 probes/s."""
    import json
    under = json.loads(twin("probe", "mini", "--plan", "--json", "--max-pps", "280").stdout)
    over = json.loads(twin("probe", "mini", "--plan", "--json", "--max-pps", "279").stdout)
    assert under["probes_per_s"] == 280 and not under["refused"] and over["refused"]
    unpaced = json.loads(twin("probe", "mini", "--plan", "--json", "--min-link-pps", "0", "--max-pps", "279").stdout)
    assert unpaced["probes_per_s"] < 280 and unpaced["paced_flows"] == 0 and not unpaced["refused"]
    text = twin("probe", "mini", "--plan", "--max-pps", "100").stdout
    assert "a run would be refused: 280.0 probes/s is over --max-pps 100" in text


def test_unknown_lab_lists_known_ones():
    result = twin("lab", "show", "nosuch")
    assert result.returncode == 2
    assert "error: no lab file named 'nosuch'" in result.stderr
    assert "hint: known labs: aipod, mini, mini-dual, pod128, pod64, rail4, rail4-ar, rail8;" in result.stderr


def test_bad_lab_file_reports_line_and_hint(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nfabric:\n  tiers: 2\n  hosts_per_group: 2\n  spines_per_plan: 2\n")
    result = twin("lab", "show", str(bad))
    assert result.returncode == 2
    assert f"{bad}:5: fabric.spines_per_plan: unknown key" in result.stderr
    assert "did you mean 'spines_per_plane'?" in result.stderr


def test_graph_writes_png_and_svg(tmp_path):
    for name in ("fabric.png", "fabric.svg"):
        result = twin("lab", "graph", "rail4", "-o", str(tmp_path / name))
        assert result.returncode == 0, result.stderr
        assert (tmp_path / name).stat().st_size > 1000
    assert (tmp_path / "fabric.png").read_bytes()[:4] == b"\x89PNG"


def test_graph_rejects_unknown_format(tmp_path):
    result = twin("lab", "graph", "mini", "-o", str(tmp_path / "x.gif"))
    assert result.returncode == 2 and "use a .png or .svg" in result.stderr


def test_status_of_a_lab_that_is_not_up(tmp_path):
    import os
    env_run = tmp_path / "run"
    result = subprocess.run([sys.executable, "-c", "from twin.cli import main; main()", "lab", "status", "ghost"],
                            capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "FABRIC_TWIN_RUN_DIR": str(env_run)})
    assert result.returncode == 2 and "lab 'ghost' is not running" in result.stderr


def test_export_containerlab_writes_topology_and_configs(tmp_path):
    result = twin("export", "mini", "--format", "containerlab", "--out", str(tmp_path / "clab"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "clab" / "mini.clab.yml").is_file() and (tmp_path / "clab" / "spine-1" / "bgpd.conf").is_file()
    assert "8 nodes, 8 links" in result.stdout


def test_drain_on_a_lab_that_is_not_up_says_how_to_start_it():
    result = twin("lab", "drain", "nosuchlab", "a -- b")
    assert result.returncode != 0 and "twin lab up nosuchlab" in result.stderr + result.stdout


def test_check_says_ok_or_names_the_problem_and_exits_accordingly(tmp_path):
    import json
    good = twin("check", "rail4", "silent-drop")
    assert good.returncode == 0 and good.stdout.count("ok ") == 2, good.stdout + good.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nlab: mini\nduration_s: 10\nfaults:\n  - {id: a, kind: link_dwn, link: x -- y}\n")
    result = twin("check", "--json", str(bad), "rail4")
    assert result.returncode == 2
    first, second = json.loads(result.stdout)
    assert not first["ok"] and first["problems"][0]["line"] == 5 and "link_dwn" in first["problems"][0]["message"]
    assert second["ok"] and second["kind"] == "lab"


def test_schema_prints_json_schema():
    import json
    result = twin("schema", "scenario")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    kinds = {entry["properties"]["kind"]["const"] for entry in schema["properties"]["faults"]["items"]["oneOf"]}
    assert {"silent_drop", "pfc_storm", "bgp_down"} <= kinds


def test_bench_refuses_multipath_on_tcp_before_it_opens_the_lab():
    """Spraying and selective repeat are the RoCE transport's; gloo's TCP would ignore them."""
    result = twin("bench", "collective", "no-such-lab", "--multipath", "rc")
    assert result.returncode == 2 and "--multipath" in result.stderr and "roce" in result.stderr
