"""The runtimes the integration tiers run on: netns always, docker where a daemon runs.

The docker tier brings up renamed copies of the shipped labs (`d-mini`, `d-rail4`): a lab name
is machine-wide (namespaces, containers, the run directory), and `make test` runs the two tiers
side by side in two pytest-xdist workers."""

import subprocess
from collections.abc import Callable

import pytest

from twin.errors import RuntimeBackendError

from .helpers import DOCKER_LAB_PREFIX, ROOT, lab_copy

# Module fixtures that bring a lab up take these params: every test of the module runs on both.
RUNTIMES = ["netns", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(scope="session")
def docker_images():
    """The images this code runs on, built (`make images`, cached layers) when missing or stale."""
    from twin.lab.runtime.docker import check_image, client
    api = client()
    try:
        for kind in ("switch", "host"):
            check_image(api, kind)
    except RuntimeBackendError:
        subprocess.run(["make", "images"], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    finally:
        api.close()


@pytest.fixture(scope="module", params=RUNTIMES)
def runtime(request) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_images")
    return request.param


@pytest.fixture(scope="module")
def lab_ref(runtime, tmp_path_factory) -> Callable[[str], str]:
    """`lab_ref("mini")`: what this tier brings up for a shipped lab (a name on netns, the path
    of a renamed copy on docker); the running lab's name is then `fabric.name`."""
    if runtime == "netns":
        return lambda name: name
    folder = tmp_path_factory.mktemp("docker-labs")
    return lambda name: str(lab_copy(folder, name, DOCKER_LAB_PREFIX + name))
