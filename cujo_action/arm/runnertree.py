"""The processes a hosted runner shows while a step runs, for the sandbox's PID namespace.

A hosted ``ubuntu-24.04`` runner is a whole virtual machine: a pull request's step that
lists ``/proc`` sees ``systemd`` as pid 1, about 200 processes (a probe run on a hosted runner), the
machine's daemons and the runner's own chain::

    /opt/runner/provisioner/provisioner --agentdirectory /home/runner/runners ...
      /home/runner/runners/2.287.1/bin/Runner.Listener run
        /home/runner/runners/2.287.1/bin/Runner.Worker spawnclient 112 115
          /usr/bin/bash -e /home/runner/work/_temp/<uuid>.sh

(``ps`` on a hosted runner, Cycode's "GitHub Actions runner" write-up, 2022). Each
sandboxed command gets a PID namespace of its own, so the worker's program
(``runnerworker.py``) builds this tree in it before the step starts; this module says
what the tree is. Pure: values in, values out.

What the kernel shows of the tree, and what it cannot (kernel threads are invisible in a
PID namespace, so they are stand-ins; every process is the sandbox user's; start times
and pids are the sandbox's), is in ``docs/limits.md``, "What a pull request can still
tell".
"""

from __future__ import annotations

from dataclasses import dataclass

# A process names itself in 15 bytes at most (the kernel's TASK_COMM_LEN less its NUL).
NAME_MAX = 15


@dataclass(frozen=True)
class Proc:
    """One process of the tree: its name, its command line and its children.

    ``argv`` is ``()`` for a kernel thread (an empty command line, which ``ps`` shows as
    ``[name]``) and None for the worker, which keeps the command line it was started with.
    """

    name: str
    argv: tuple[str, ...] | None
    children: tuple[Proc, ...] = ()


# Linux 6.8's kernel threads on a Hyper-V guest (the image's kernel is linux-azure), named
# from the kernel's sources: kthreadd's children in the order they start. Threads for
# every CPU (``{cpu}``) are made once per CPU the sandbox sees. Names longer than
# NAME_MAX show cut; a workqueue worker shows its idle name (no ``-<queue>`` suffix).
_BOOT_THREADS = (
    "pool_workqueue_release",
    "kworker/R-rcu_gp",
    "kworker/R-sync_wq",
    "kworker/R-slub_flushwq",
    "kworker/R-netns",
    "kworker/0:0",
    "kworker/0:0H",
    "kworker/R-mm_percpu_wq",
    "rcu_tasks_kthread",
    "rcu_tasks_rude_kthread",
    "rcu_tasks_trace_kthread",
    "ksoftirqd/0",
    "rcu_preempt",
    "rcu_exp_par_gp_kthread_worker/0",
    "rcu_exp_gp_kthread_worker",
    "migration/0",
    "idle_inject/0",
    "cpuhp/0",
)
_CPU_THREADS = (
    "cpuhp/{cpu}",
    "idle_inject/{cpu}",
    "migration/{cpu}",
    "ksoftirqd/{cpu}",
    "kworker/{cpu}:0",
    "kworker/{cpu}:0H",
)
_DEVICE_THREADS = (
    "kdevtmpfs",
    "kworker/R-inet_frag_wq",
    "kauditd",
    "khungtaskd",
    "oom_reaper",
    "kworker/R-writeback",
    "kcompactd0",
    "ksmd",
    "khugepaged",
    "kworker/R-kintegrityd",
    "kworker/R-kblockd",
    "kworker/R-blkcg_punt_bio",
    "irq/9-acpi",
    "kworker/R-tpm_dev_wq",
    "kworker/R-ata_sff",
    "kworker/R-md",
    "kworker/R-md_bitmap",
    "kworker/R-edac-poller",
    "kworker/R-devfreq_wq",
    "watchdogd",
    "kswapd0",
    "ecryptfs-kthread",
    "kworker/R-kthrotld",
    "kworker/R-acpi_thermal_pm",
    "kworker/R-hv_vmbus_con",
    "kworker/R-hv_pri_chan",
    "kworker/R-hv_sub_chan",
    "kworker/R-mld",
    "kworker/R-ipv6_addrconf",
    "kworker/R-kstrp",
    "kworker/R-zswap-shrink",
    "kworker/R-charger_manager",
    "hv_balloon",
    "scsi_eh_0",
    "kworker/R-scsi_tmf_0",
    "scsi_eh_1",
    "kworker/R-scsi_tmf_1",
    "kworker/R-storvsc_error_wq_0",
    "kworker/R-storvsc_error_wq_1",
    "jbd2/sda1-8",
    "kworker/R-ext4-rsv-conversion",
    "kworker/R-cryptd",
    "hwrng",
)
# Workers started later, as the machine boots and works (per CPU, then unbound ones).
_LATE_CPU_THREADS = ("kworker/{cpu}:1", "kworker/{cpu}:1H", "kworker/{cpu}:2")
_UNBOUND_WORKERS = 8

_BAUDS = "115200,57600,38400,9600"  # serial-getty@.service's, on the serial console
# The image's services, as their units start them on Ubuntu 24.04 (systemd's own, the
# Azure agent and Hyper-V daemons of linux-azure, Docker from the image's software list,
# chrony as the image's /etc/passwd has it), each with the command line its unit gives.
_SERVICES = (
    Proc("systemd-journal", ("/usr/lib/systemd/systemd-journald",)),
    Proc("multipathd", ("/sbin/multipathd", "-d", "-s")),
    Proc("systemd-udevd", ("/usr/lib/systemd/systemd-udevd",)),
    Proc("systemd-network", ("/usr/lib/systemd/systemd-networkd",)),
    Proc("systemd-resolve", ("/usr/lib/systemd/systemd-resolved",)),
    Proc(
        "chronyd",
        ("/usr/sbin/chronyd", "-F", "1"),
        (Proc("chronyd", ("/usr/sbin/chronyd", "-F", "1")),),
    ),
    Proc(
        "dbus-daemon",
        (
            "@dbus-daemon",
            "--system",
            "--address=systemd:",
            "--nofork",
            "--nopidfile",
            "--systemd-activation",
            "--syslog-only",
        ),
    ),
    Proc("irqbalance", ("/usr/sbin/irqbalance",)),
    Proc(
        "networkd-dispat",
        ("/usr/bin/python3", "/usr/bin/networkd-dispatcher", "--run-startup-triggers"),
    ),
    Proc("polkitd", ("/usr/lib/polkit-1/polkitd", "--no-debug")),
    Proc("rsyslogd", ("/usr/sbin/rsyslogd", "-n", "-iNONE")),
    Proc("snapd", ("/usr/lib/snapd/snapd",)),
    Proc("systemd-logind", ("/usr/lib/systemd/systemd-logind",)),
    Proc("cron", ("/usr/sbin/cron", "-f", "-P")),
    Proc("hv_kvp_daemon", ("/usr/sbin/hv_kvp_daemon", "-n")),
    Proc(
        "python3",
        ("/usr/bin/python3", "-u", "/usr/sbin/waagent", "-daemon"),
        (Proc("python3", ("python3", "-u", "/usr/sbin/waagent", "-run-exthandlers")),),
    ),
    Proc("containerd", ("/usr/bin/containerd",)),
    Proc("agetty", ("/sbin/agetty", "-o", "-p -- \\u", "--keep-baud", _BAUDS, "-", "vt220")),
    Proc("agetty", ("/sbin/agetty", "-o", "-p -- \\u", "--noclear", "-", "linux")),
    Proc(
        "dockerd",
        ("/usr/bin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"),
    ),
)
PROVISIONER_DIR = "/opt/runner/provisioner"


def _threads(cpus: int) -> tuple[Proc, ...]:
    names = [*_BOOT_THREADS]
    for cpu in range(1, cpus):
        names += [n.format(cpu=cpu) for n in _CPU_THREADS]
    names += _DEVICE_THREADS
    for cpu in range(cpus):
        names += [n.format(cpu=cpu) for n in _LATE_CPU_THREADS]
    names += [f"kworker/u{2 * cpus}:{n}" for n in range(_UNBOUND_WORKERS)]
    return tuple(Proc(name, ()) for name in names)


def runner_tree(cpus: int, runner_root: str, runner_bin: str) -> Proc:
    """Return pid 1 of a hosted runner with ``cpus`` CPUs, and everything below it.

    ``runner_root`` is the folder the provisioner keeps runners in, ``runner_bin`` the
    running version's ``bin``: the listener and the worker (the tree's one None ``argv``,
    whose child is the step) live there.
    """
    worker = Proc("Runner.Worker", None)
    listener = Proc("Runner.Listener", (f"{runner_bin}/Runner.Listener", "run"), (worker,))
    provisioner = Proc(
        "provisioner",
        (f"{PROVISIONER_DIR}/provisioner", "--agentdirectory", runner_root,
         "--settings", f"{PROVISIONER_DIR}/.settings"),
        (listener,),
    )  # fmt: skip
    kthreadd = Proc("kthreadd", (), _threads(max(1, cpus)))
    return Proc("systemd", ("/sbin/init",), (kthreadd, *_SERVICES, provisioner))


def count(tree: Proc) -> int:
    """Return how many processes ``tree`` is, its root included."""
    return 1 + sum(count(child) for child in tree.children)


def literal(tree: Proc) -> tuple[object, ...]:
    """Return ``tree`` as nested plain tuples ``(name, argv, children)`` for the program."""
    return (tree.name, tree.argv, tuple(literal(child) for child in tree.children))
