import subprocess
import sys

import pytest

from devices.errors import Dflash2Error
from devices.identity import current_device, parse_selector, parse_selectors


def test_native_device_is_read_from_mlx():
    import mlx.core as mx

    dev = current_device("")
    assert dev.mlx_version == mx.__version__
    assert dev.emulated is False
    assert dev.backend in ("cpu", "metal", "cuda")
    if dev.backend == "cpu":
        assert dev.arch == "cpu" and dev.generation is None


@pytest.mark.parametrize("arch,gen,size", [("applegpu_g13s", 13, "s"), ("applegpu_g14g", 14, "g"),
                                           ("APPLEGPU_G15D", 15, "d"), ("applegpu_g17p", 17, "p")])
def test_emulated_identity(arch, gen, size):
    dev = current_device(arch)
    assert (dev.generation, dev.size, dev.emulated, dev.backend) == (gen, size, True, "cpu")
    assert dev.arch == arch.lower()
    assert dev.to_json()["emulated"] is True
    assert type(dev).from_json(dev.to_json()) == dev


@pytest.mark.parametrize("bad", ["applegpu_g12s", "applegpu_g13x", "g13s", "m1max", "applegpu_"])
def test_malformed_arch_is_a_clear_error(bad):
    with pytest.raises(Dflash2Error, match="bad device architecture"):
        current_device(bad)


def test_env_var_emulates_and_bad_value_fails_in_a_fresh_process():
    code = "from dflash2 import current_device; print(current_device().arch)"
    ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        env={"DFLASH2_DEVICE_ARCH": "applegpu_g14s", "PATH": ""}, check=False)
    assert ok.stdout.strip() == "applegpu_g14s"
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"DFLASH2_DEVICE_ARCH": "applegpu_gXX", "PATH": ""}, check=False)
    assert bad.returncode != 0 and "bad device architecture" in bad.stderr


def test_selectors_match_architecture_generation_and_all():
    g13s, g14g, g15s = (current_device(a) for a in
                        ("applegpu_g13s", "applegpu_g14g", "applegpu_g15s"))
    exact, gen, every = parse_selectors("g13s, g14 ,all")
    assert exact.matches(g13s) and not exact.matches(g14g)
    assert gen.matches(g14g) and not gen.matches(g13s) and not gen.matches(g15s)
    assert all(every.matches(d) for d in (g13s, g14g, g15s))
    assert gen.emulation_target() == "applegpu_g14g"
    assert exact.emulation_target() == "applegpu_g13s"
    assert parse_selector("sm90").value == "sm_90"


@pytest.mark.parametrize("bad", ["", " , ", "g99", "m2", "g13z"])
def test_bad_selectors(bad):
    with pytest.raises(Dflash2Error):
        parse_selectors(bad)
