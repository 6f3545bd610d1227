"""The docker runtime's pieces that need no daemon: image identity, commands, ownership names."""

import sys

import pytest

from twin.errors import RuntimeBackendError
from twin.lab.runtime import get_runtime, images, names
from twin.lab.runtime.docker import IMAGE_PYTHON, DockerRuntime, check_image


def test_docker_is_a_registered_runtime_with_the_netns_naming():
    assert names() == ["docker", "netns"]
    runtime = get_runtime("docker", "rail4")
    assert runtime.kind == "docker"
    # Namespaces are attached where the netns runtime keeps them: everything on netns_path works.
    assert runtime.resource_name("leaf-g1-r1") == "ftw-rail4.leaf-g1-r1"
    assert runtime.netns_path("leaf-g1-r1") == "/run/netns/ftw-rail4.leaf-g1-r1"


def test_the_callers_python_becomes_the_images():
    assert DockerRuntime._in_image([sys.executable, "-m", "twin.probes.agent", "x.json"]) == \
        [IMAGE_PYTHON, "-m", "twin.probes.agent", "x.json"]
    assert DockerRuntime._in_image(["vtysh", "-c", "show bgp summary"]) == ["vtysh", "-c", "show bgp summary"]


def test_source_digest_follows_every_source_file(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "t.j2").write_text("{{ x }}\n")
    monkeypatch.setattr(images, "PACKAGE", tmp_path / "pkg")
    first = images.source_digest()
    assert images.source_digest() == first
    (tmp_path / "pkg" / "t.j2").write_text("{{ y }}\n")
    changed = images.source_digest()
    assert changed != first
    (tmp_path / "pkg" / "t.j2").rename(tmp_path / "pkg" / "u.j2")  # same content, other name
    assert images.source_digest() != changed


def test_images_are_tagged_with_the_version():
    from twin import __version__
    assert images.image_for("switch") == f"fabric-twin-switch:{__version__}"
    assert images.image_for(images.image_kind(is_switch=False)) == f"fabric-twin-host:{__version__}"


class _Images:
    def __init__(self, found):
        self.found = found

    def get(self, name):
        from docker.errors import ImageNotFound
        if name not in self.found:
            raise ImageNotFound(name)
        return self.found[name]


class _Image:
    def __init__(self, labels):
        self.labels = labels


class _Api:
    def __init__(self, found):
        self.images = _Images(found)


def test_a_missing_or_stale_image_is_refused_with_the_fix():
    with pytest.raises(RuntimeBackendError) as missing:
        check_image(_Api({}), "switch")
    assert "not built" in missing.value.message and missing.value.hint == "run `make images`"
    stale = _Api({images.image_for("host"): _Image({images.SOURCE_LABEL: "0000"})})
    with pytest.raises(RuntimeBackendError) as old:
        check_image(stale, "host")
    assert "other sources" in old.value.message and "make images" in old.value.hint
    fresh = _Api({images.image_for("host"): _Image({images.SOURCE_LABEL: images.source_digest()})})
    assert check_image(fresh, "host") == images.image_for("host")
