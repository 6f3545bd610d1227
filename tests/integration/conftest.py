"""The runtimes the integration tiers run on: netns always, docker where a daemon runs."""

import subprocess

import pytest

from twin.errors import RuntimeBackendError

from .helpers import ROOT

# Module fixtures that bring a lab up take these params: every test of the module runs on both.
RUNTIMES = ["netns", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(scope="session")
def docker_images():
    """The images this code runs on, built (`make images`, cached layers) when missing or stale."""
    from twin.runtime.docker import check_image, client
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
