"""The local cloud's instances: launch, describe, terminate, idempotency, limits, and VMs that die."""

from __future__ import annotations

import json
import socket
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from spotrun.providers.base import NoCapacity, PriceTooLow, Provider, QuotaExceeded
from spotrun.providers.local import LocalProvider, UnknownInstance, trace_market

# Writes what it sees to boot.json on its disk and leaves two processes that escape its process group:
# one in a session of its own, one orphaned by its exiting parent.
BOOT_SCRIPT = textwrap.dedent(
    """
    import json, os, subprocess, sys
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    detached = subprocess.Popen(sleep, start_new_session=True)
    spawn_orphan = f"import subprocess; p = subprocess.Popen({sleep!r}); open('orphan.pid', 'w').write(str(p.pid))"
    subprocess.run([sys.executable, "-c", spawn_orphan], check=True)
    seen = {
        "env": {k: v for k, v in os.environ.items() if k.startswith("SPOTRUN_") or k == "GREETING"},
        "cwd": os.getcwd(),
        "pids": [os.getpid(), detached.pid, int(open("orphan.pid").read())],
    }
    with open("boot.json.tmp", "w") as out:
        json.dump(seen, out)
    os.rename("boot.json.tmp", "boot.json")
    """
)


def started_processes(disk: Path, cloud) -> tuple[dict, list[tuple[int, float]]]:  # type: ignore[no-untyped-def]
    boot_file = disk / "boot.json"
    cloud.wait_for(boot_file.exists, what="the boot command's report")
    seen = json.loads(boot_file.read_text())
    return seen, [(pid, psutil.Process(pid).create_time()) for pid in seen["pids"]]


def test_local_provider_implements_the_provider_protocol(cloud) -> None:  # type: ignore[no-untyped-def]
    assert isinstance(cloud.provider, Provider)
    assert cloud.provider.zones("local.cpu") == ["local-a", "local-b", "local-c"]


def test_boot_command_runs_on_the_disk_with_the_instance_environment(cloud) -> None:  # type: ignore[no-untyped-def]
    info = cloud.launch_running("life-1", user_data=cloud.user_data(BOOT_SCRIPT))
    assert info.instance_id.startswith("li-") and len(info.instance_id) == 15
    assert info.address == "127.0.0.2" and info.market == "spot" and info.zone == "local-a"
    disk = Path(info.detail["disk"])
    seen, _ = started_processes(disk, cloud)
    assert Path(seen["cwd"]) == disk.resolve()
    assert seen["env"] == {
        "GREETING": "hi",
        "SPOTRUN_INSTANCE_ID": info.instance_id,
        "SPOTRUN_INSTANCE_DISK": str(disk.resolve()),
        "SPOTRUN_LOCAL_METADATA": str(Path(info.detail["metadata"]).resolve()),
        "SPOTRUN_INSTANCE_ZONE": "local-a",
        "SPOTRUN_INSTANCE_MARKET": "spot",
        "SPOTRUN_INSTANCE_ADDRESS": "127.0.0.2",
    }
    record = json.loads((disk.parent / "instance.json").read_text())
    assert record["id"] == info.instance_id and record["type"] == "local.cpu" and record["state"] == "running"
    assert record["pid"] == info.detail["pid"] and record["pid_started_at"] > 0
    assert (Path(info.detail["metadata"]) / "placement" / "availability-zone").read_text() == "local-a"


def test_each_instance_gets_its_own_loopback_address_and_a_replacement_a_new_one(cloud) -> None:  # type: ignore[no-untyped-def]
    first = cloud.launch_running("addr-1", user_data=cloud.user_data(BOOT_SCRIPT))
    second = cloud.launch_running("addr-2", user_data=cloud.user_data(BOOT_SCRIPT))
    assert (first.address, second.address) == ("127.0.0.2", "127.0.0.3")
    cloud.provider.terminate(first.instance_id)
    replacement = cloud.launch_running("addr-3", user_data=cloud.user_data(BOOT_SCRIPT))
    assert replacement.address == "127.0.0.4"  # round-robin: the old master's address is not handed out again
    with socket.socket() as listener:  # the address is real: something can listen on it and be reached there
        listener.bind((replacement.address, 0))
        listener.listen()
        with socket.create_connection(listener.getsockname(), timeout=5):
            pass


def test_terminate_kills_every_process_and_deletes_the_disk(cloud) -> None:  # type: ignore[no-untyped-def]
    info = cloud.launch_running("life-2", user_data=cloud.user_data(BOOT_SCRIPT))
    disk = Path(info.detail["disk"])
    _, started = started_processes(disk, cloud)
    vm = psutil.Process(info.detail["pid"])
    assert all(cloud.alive(pid, at) for pid, at in started)

    cloud.provider.terminate(info.instance_id)

    after = cloud.provider.describe(info.instance_id)
    assert after.state == "terminated" and after.reclaimed is False and after.terminated_at is not None
    assert not disk.exists()
    assert not [pid for pid, at in started if cloud.alive(pid, at)]
    assert cloud.processes_marked_with(info.instance_id) == []
    cloud.wait_for(lambda: not cloud.alive(vm.pid, vm.create_time()), what="the vm process to exit")
    cloud.provider.terminate(info.instance_id)  # idempotent
    assert cloud.provider.describe(info.instance_id).state == "terminated"


def test_instance_stays_up_after_its_boot_command_exits(cloud) -> None:  # type: ignore[no-untyped-def]
    quick = {"argv": [sys.executable, "-c", "raise SystemExit(3)"], "env": {}}
    info = cloud.launch_running("life-3", user_data=quick, market="on-demand")
    info = cloud.wait_for(
        lambda: (now := cloud.provider.describe(info.instance_id)).detail.get("boot_exit_code") == 3 and now,
        what="the boot exit code",
    )
    assert info.state == "running"


def test_a_boot_command_that_fails_is_a_start_failure_with_its_exit_and_last_lines(cloud) -> None:  # type: ignore[no-untyped-def]
    """Only Kubernetes told the controller why an instance could not start the agent: a local instance whose Python
    cannot import spotrun was lost at each boot timeout and relaunched without end."""
    script = "import sys\nprint('bootstrapping')\nsys.exit('No module named spotrun.agent')"
    failing = {"argv": [sys.executable, "-c", script], "env": {}}
    info = cloud.launch_running("boot-fails", user_data=failing, market="on-demand")
    info = cloud.wait_for(
        lambda: (now := cloud.provider.describe(info.instance_id)).start_failure and now, what="the start failure"
    )
    assert info.state == "running"
    assert info.start_failure == "the boot command exited 1: bootstrapping | No module named spotrun.agent"


def test_a_boot_command_that_exits_0_or_is_killed_is_no_start_failure(cloud) -> None:  # type: ignore[no-untyped-def]
    ends = {"fine": "raise SystemExit(0)", "killed": "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"}
    for token, script in ends.items():
        boot = {"argv": [sys.executable, "-c", script], "env": {}}
        info = cloud.launch_running(token, user_data=boot, market="on-demand")
        info = cloud.wait_for(
            lambda: (now := cloud.provider.describe(info.instance_id)).detail.get("boot_exit_code") is not None and now,
            what="the boot exit code",
        )
        assert info.start_failure is None, (token, info.start_failure)


def test_launch_is_idempotent_on_the_client_token(cloud) -> None:  # type: ignore[no-untyped-def]
    first = cloud.provider.launch(cloud.request("same-token"))
    again = cloud.provider.launch(cloud.request("same-token"))
    assert again.instance_id == first.instance_id
    assert cloud.provider.find_by_token("same-token").instance_id == first.instance_id
    assert cloud.provider.find_by_token("other-token") is None
    assert len(cloud.provider.list_instances()) == 1
    with pytest.raises(ValueError, match="same-token"):
        cloud.provider.launch(cloud.request("same-token", zone="local-b"))
    cloud.provider.terminate(first.instance_id)
    assert cloud.provider.launch(cloud.request("same-token")).state == "terminated"  # still the same instance


def test_launch_is_idempotent_across_processes(cloud, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    go = tmp_path / "go"
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from spotrun.providers.base import LaunchRequest
        from spotrun.providers.local import LocalProvider
        provider = LocalProvider(root={str(cloud.root)!r})
        request = LaunchRequest(zone="local-b", market="on-demand", instance_type="local.cpu",
                                client_token="raced", user_data={cloud.user_data()!r})
        open(sys.argv[1], "w").close()
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        print(provider.launch(request).instance_id)
        """
    )
    ready = [tmp_path / f"ready-{n}" for n in range(3)]
    racers = [subprocess.Popen([sys.executable, "-c", script, str(at)], stdout=subprocess.PIPE, text=True)
              for at in ready]
    cloud.wait_for(lambda: all(at.exists() for at in ready), 30, "the racers to import and wait at the line")
    go.touch()
    ids = {racer.communicate(timeout=30)[0].strip() for racer in racers}
    assert len(ids) == 1 and all(racer.returncode == 0 for racer in racers)
    assert [info.instance_id for info in cloud.provider.list_instances()] == list(ids)


def test_spot_launch_above_max_price_is_refused(cloud) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PriceTooLow, match="local-b"):
        cloud.provider.launch(cloud.request("price-1", zone="local-b", max_price=1.0))  # local-b spot is $1.02/h
    info = cloud.provider.launch(cloud.request("price-2", zone="local-a", max_price=1.0))  # local-a: $0.9731/h
    assert info.state in ("pending", "running")
    on_demand = cloud.provider.launch(cloud.request("price-3", market="on-demand", max_price=0.01))
    assert on_demand.market == "on-demand"


def test_quota_limits_running_instances(cloud) -> None:  # type: ignore[no-untyped-def]
    provider = LocalProvider(root=cloud.root, quota=1)
    first = provider.launch(cloud.request("quota-1"))
    with pytest.raises(QuotaExceeded, match="quota is 1"):
        provider.launch(cloud.request("quota-2"))
    provider.terminate(first.instance_id)
    assert provider.launch(cloud.request("quota-2")).state in ("pending", "running")


def test_no_spot_capacity_where_the_trace_sample_is_zero(cloud, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    empty, full = tmp_path / "empty.json", tmp_path / "full.json"
    empty.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [0, 0, 1]}))
    full.write_text(json.dumps({"metadata": {"gap_seconds": 600}, "data": [1]}))
    cloud.provider.set_market(trace_market({"local-a": empty, "local-b": full}, speed=1.0))
    with pytest.raises(NoCapacity, match="local-a"):
        cloud.provider.launch(cloud.request("cap-1", zone="local-a"))
    with pytest.raises(NoCapacity, match="local-c"):  # no trace: no spot market there
        cloud.provider.launch(cloud.request("cap-2", zone="local-c"))
    assert cloud.provider.launch(cloud.request("cap-3", zone="local-b")).market == "spot"
    assert cloud.provider.launch(cloud.request("cap-4", zone="local-a", market="on-demand")).market == "on-demand"


def test_bad_requests_get_clear_errors(cloud) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="unknown zone 'us-east-1a'"):
        cloud.provider.launch(cloud.request("bad-1", zone="us-east-1a"))
    with pytest.raises(ValueError, match="'m5.large'"):
        cloud.provider.launch(cloud.request("bad-2", instance_type="m5.large"))
    with pytest.raises(ValueError, match="argv"):
        cloud.provider.launch(cloud.request("bad-3", user_data={"argv": "python train.py"}))
    with pytest.raises(UnknownInstance):
        cloud.provider.preempt("li-000000000000")
    cloud.provider.terminate("li-000000000000")  # gone already, as every cloud answers: the controller moves on
    assert cloud.provider.list_instances() == []


def test_a_vm_killed_outright_is_terminated_and_its_processes_cleaned_up(cloud) -> None:  # type: ignore[no-untyped-def]
    info = cloud.launch_running("crash-1", user_data=cloud.user_data(BOOT_SCRIPT))
    disk = Path(info.detail["disk"])
    _, started = started_processes(disk, cloud)
    cloud.wait_for(  # the VM has written down the processes it is responsible for
        lambda: len(json.loads((disk.parent / "processes.json").read_text())) >= 3, what="processes.json"
    )
    vm_started_at = psutil.Process(info.detail["pid"]).create_time()
    os.kill(info.detail["pid"], signal.SIGKILL)
    cloud.wait_for(lambda: not cloud.alive(info.detail["pid"], vm_started_at), what="the vm to die")

    after = cloud.provider.describe(info.instance_id)
    assert after.state == "terminated" and after.reclaimed is False
    assert after.detail["reason"] == "vm process vanished"
    assert not disk.exists()
    assert not [pid for pid, at in started if cloud.alive(pid, at)]
    assert cloud.processes_marked_with(info.instance_id) == []


def test_an_unreadable_record_is_unknown_never_terminated(cloud) -> None:  # type: ignore[no-untyped-def]
    info = cloud.launch_running("broken-1")
    record_file = Path(info.detail["disk"]).parent / "instance.json"
    intact = record_file.read_text()
    record_file.write_text("{not json")
    try:
        assert cloud.provider.describe(info.instance_id).state == "unknown"
        assert cloud.provider.describe("li-ffffffffffff").state == "unknown"
    finally:
        record_file.write_text(intact)
    assert cloud.provider.describe(info.instance_id).state == "running"


def test_a_launcher_killed_while_creating_the_instance_leaves_no_instance_behind(cloud) -> None:  # type: ignore[no-untyped-def]
    # The controller runs launches in its own process: a SIGKILL after the instance's folder was made but before its
    # record (with the client token) was written must not leave an instance that the cloud lists (as "unknown", under
    # an id no attempt knows) while the relaunch by the same token, finding no record, makes another one.
    script = textwrap.dedent(
        f"""
        import os, signal
        from spotrun.providers.base import LaunchRequest
        from spotrun.providers.local import LocalProvider, records
        def killed_before_the_record(self, record):
            os.kill(os.getpid(), signal.SIGKILL)
        records.InstanceDir.write = killed_before_the_record
        provider = LocalProvider(root={str(cloud.root)!r})
        provider.launch(LaunchRequest(zone="local-a", market="spot", instance_type="local.cpu",
                                      client_token="killed", user_data={cloud.user_data()!r}))
        """
    )
    launcher = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert launcher.returncode == -signal.SIGKILL
    assert cloud.provider.find_by_token("killed") is None
    assert cloud.provider.list_instances() == []  # nothing was launched
    again = cloud.provider.launch(cloud.request("killed"))  # the restarted controller launches by the same token
    assert [info.instance_id for info in cloud.provider.list_instances()] == [again.instance_id]
    assert sorted(path.name for path in (cloud.root / "instances").iterdir()) == [again.instance_id]  # swept up


def vm_processes(instance_path: Path) -> list[psutil.Process]:
    """Live VM processes (``python -m spotrun.providers.local.vm <folder>``) of one instance's folder."""
    found = []
    for process in psutil.process_iter():
        try:
            command = process.cmdline()
            if "spotrun.providers.local.vm" in command and command[-1] == str(instance_path):
                if process.status() != psutil.STATUS_ZOMBIE:
                    found.append(process)
        except psutil.Error:
            continue
    return found


def test_a_launcher_killed_after_starting_the_vm_leaves_one_vm_to_a_relaunch(cloud) -> None:  # type: ignore[no-untyped-def]
    # The launcher is SIGKILLed once the VM process runs, before the VM's pid is on record; the VM is held (SIGSTOP)
    # in its own start, before it records itself. The relaunch by the same token started a second VM for the same
    # instance: two boot commands, the first VM off the record.
    script = textwrap.dedent(
        f"""
        import os, signal, subprocess
        from spotrun.providers.base import LaunchRequest
        from spotrun.providers.local import LocalProvider, provider
        popen = subprocess.Popen
        def killed_after_the_vm_started(*args, **kwargs):
            vm = popen(*args, **kwargs)
            os.kill(vm.pid, signal.SIGSTOP)
            print(vm.pid, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        provider.subprocess.Popen = killed_after_the_vm_started
        LocalProvider(root={str(cloud.root)!r}).launch(LaunchRequest(
            zone="local-a", market="spot", instance_type="local.cpu", client_token="half",
            user_data={cloud.user_data()!r}))
        """
    )
    launcher = subprocess.run([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, timeout=60)
    assert launcher.returncode == -signal.SIGKILL
    first_vm = psutil.Process(int(launcher.stdout))
    try:
        pending = cloud.provider.find_by_token("half")
        assert pending.state == "pending" and pending.detail["pid"] is None
        instance_path = Path(pending.detail["disk"]).parent
        again = cloud.provider.launch(cloud.request("half"))  # the restarted controller launches by the same token
        assert again.instance_id == pending.instance_id
        assert [vm.pid for vm in vm_processes(instance_path)] == [first_vm.pid], "a second VM was started"
    finally:
        first_vm.resume()
    running = cloud.wait_for_state(pending.instance_id, "running")
    assert running.detail["pid"] == first_vm.pid
