"""A psutil-compatible layer over taskdiag: ``import taskdiag.psutil as psutil``.

``process_iter(attrs)`` reads every process in one taskdiag request instead of a few files per
process; ``Process(pid)`` methods read their process in one request each. Names, units, named
tuples, status strings, ``ad_value`` and the exceptions are psutil's (Linux, psutil 7.2).

The module is psutil's whole module. What taskdiag carries itself: ``Process``, ``Popen`` (a
taskdiag Process wrapping a subprocess.Popen, as psutil's), ``process_iter``, ``pids``,
``pid_exists``, ``wait_procs``, the exceptions, and the constants they use (``STATUS_*``,
``RLIMIT_*``, ``RLIM_INFINITY``, the platform flags ``LINUX``, ``POSIX``...). Every other name of
psutil (system-wide functions such as ``cpu_count``, ``virtual_memory`` or ``net_connections``,
``CONN_*``, ``IOPRIO_*``, ``PROCFS_PATH``, ``__version__`` and ``version_info``: psutil's, as
what is passed through is that version's API) is psutil's own, passed through when it is first
asked for: importing this module does not import psutil. ``dir()`` and ``__all__`` list psutil's
names too where psutil is installed.

Process methods no taskdiag group carries (``open_files``, ``net_connections``,
``connections``, ``ionice``, to get or set) are answered by psutil's own ``psutil.Process`` of the
same process, made the first time one is called and checked to be the same process (pid and
start time, again after each answer): a reused pid is never answered for, NoSuchProcess is
raised instead. Their errors are this module's exceptions.

Without psutil installed, those names and methods raise ``PsutilNotInstalled``, a
ModuleNotFoundError (an ImportError) whose message names psutil and ``pip install psutil``:
``from taskdiag.psutil import cpu_count`` fails with that message, and so do ``hasattr`` and
``getattr`` with a default, which only swallow AttributeError: a program that needs psutil's
functions is told to install psutil rather than told its platform lacks them. A name psutil
7.2 does not have is an AttributeError. Everything taskdiag carries works without psutil;
``as_dict()`` and ``process_iter`` without attrs then leave out the attributes that need it.

The exceptions become subclasses of psutil's own once psutil is imported, by anyone (looked
for whenever one is made), so ``except psutil.NoSuchProcess`` clauses catch them.

The caller's own process: taskdiag keeps its backend open between calls (BPF programs, maps
and links, an ``anon_inode:bpf-map`` mapping, a daemon connection), descriptors and mappings
of this process that are not the program's. Before it reports its own ``num_fds()``,
``memory_maps()`` (and so ``memory_full_info()``) it closes them (the next call opens its
backend again, a few ms) and reads the process as psutil does: the answer is the program's
own, what psutil reports.
"""

import bisect
import collections
import contextlib
import gc
import os
import sys
import time

from . import _taskdiag

# What this module defines itself; everything else of psutil's is passed through.
_OWN_ALL = [
    "AccessDenied",
    "Error",
    "NoSuchProcess",
    "Popen",
    "Process",
    "TimeoutExpired",
    "ZombieProcess",
    "pid_exists",
    "pids",
    "process_iter",
    "wait_procs",
    "AIX", "BSD", "FREEBSD", "LINUX", "MACOS", "NETBSD", "OPENBSD", "OSX", "POSIX", "SUNOS",
    "WINDOWS",
    "STATUS_RUNNING",
    "STATUS_SLEEPING",
    "STATUS_DISK_SLEEP",
    "STATUS_STOPPED",
    "STATUS_TRACING_STOP",
    "STATUS_ZOMBIE",
    "STATUS_DEAD",
    "STATUS_WAKE_KILL",
    "STATUS_WAKING",
    "STATUS_IDLE",
    "STATUS_LOCKED",
    "STATUS_WAITING",
    "STATUS_PARKED",
]

# psutil 7.2.2's public names (its __all__): those this module does not define are psutil's,
# passed through (or PsutilNotInstalled without psutil).
_PSUTIL_ALL = frozenset(
    """
    AF_LINK AIX AccessDenied BSD CONN_CLOSE CONN_CLOSE_WAIT CONN_CLOSING CONN_ESTABLISHED
    CONN_FIN_WAIT1 CONN_FIN_WAIT2 CONN_LAST_ACK CONN_LISTEN CONN_NONE CONN_SYN_RECV
    CONN_SYN_SENT CONN_TIME_WAIT Error FREEBSD IOPRIO_CLASS_BE IOPRIO_CLASS_IDLE
    IOPRIO_CLASS_NONE IOPRIO_CLASS_RT LINUX MACOS NETBSD NIC_DUPLEX_FULL NIC_DUPLEX_HALF
    NIC_DUPLEX_UNKNOWN NoSuchProcess OPENBSD OSX POSIX POWER_TIME_UNKNOWN POWER_TIME_UNLIMITED
    PROCFS_PATH Popen Process RLIMIT_AS RLIMIT_CORE RLIMIT_CPU RLIMIT_DATA RLIMIT_FSIZE
    RLIMIT_LOCKS RLIMIT_MEMLOCK RLIMIT_MSGQUEUE RLIMIT_NICE RLIMIT_NOFILE RLIMIT_NPROC
    RLIMIT_RSS RLIMIT_RTPRIO RLIMIT_RTTIME RLIMIT_SIGPENDING RLIMIT_STACK RLIM_INFINITY
    STATUS_DEAD STATUS_DISK_SLEEP STATUS_IDLE STATUS_LOCKED STATUS_PARKED STATUS_RUNNING
    STATUS_SLEEPING STATUS_STOPPED STATUS_TRACING_STOP STATUS_WAITING STATUS_WAKING
    STATUS_ZOMBIE SUNOS TimeoutExpired WINDOWS ZombieProcess __version__ boot_time cpu_count
    cpu_freq cpu_percent cpu_stats cpu_times cpu_times_percent disk_io_counters
    disk_partitions disk_usage getloadavg heap_info heap_trim net_connections net_if_addrs
    net_if_stats net_io_counters pid_exists pids process_iter sensors_battery sensors_fans
    sensors_temperatures swap_memory users version_info virtual_memory wait_procs
    """.split()
)

STATUS_RUNNING = "running"
STATUS_SLEEPING = "sleeping"
STATUS_DISK_SLEEP = "disk-sleep"
STATUS_STOPPED = "stopped"
STATUS_TRACING_STOP = "tracing-stop"
STATUS_ZOMBIE = "zombie"
STATUS_DEAD = "dead"
STATUS_WAKE_KILL = "wake-kill"
STATUS_WAKING = "waking"
STATUS_IDLE = "idle"
STATUS_LOCKED = "locked"
STATUS_WAITING = "waiting"
STATUS_PARKED = "parked"

# taskdiag runs on Linux only.
LINUX = POSIX = True
AIX = BSD = FREEBSD = MACOS = NETBSD = OPENBSD = OSX = SUNOS = WINDOWS = False

# The backend every call uses ("auto": as the command-line tools choose).
BACKEND = os.environ.get("TASKDIAG_BACKEND") or "auto"

# --- psutil, imported when first needed ------------------------------------------------


class PsutilNotInstalled(ModuleNotFoundError):
    """What needs psutil itself (a name taskdiag does not carry, a Process method no taskdiag
    group carries) where psutil is not installed."""

    def __init__(self, what):
        super().__init__(
            f"taskdiag.psutil: {what} is psutil's own, and psutil is not installed"
            " (pip install psutil)",
            name="psutil",
        )


class _Psutil:
    """psutil's module and its own Process class, once imported."""

    module = None
    process = None
    # The ImportError psutil's import raised (not tried again).
    missing = None
    # Whether the exceptions are psutil's subclasses yet.
    adopted = False
    # Whether psutil can be imported (looked up once, without importing it).
    installed = None


def _psutil():
    """psutil's module and own Process class (a _Psutil), imported the first time; raises
    PsutilNotInstalled where psutil cannot be imported."""
    if _Psutil.module is not None:
        return _Psutil
    if _Psutil.missing is None:
        me = sys.modules.get(__name__)
        alias = sys.modules.get("psutil")
        try:
            if alias is me and me is not None:
                # A program that put this module in psutil's place: the real one, imported
                # beside it.
                del sys.modules["psutil"]
                try:
                    import psutil as mod
                finally:
                    sys.modules["psutil"] = alias
            else:
                import psutil as mod
        except ImportError as err:
            _Psutil.missing = err
        else:
            _bind_psutil(mod)
            return _Psutil
    raise PsutilNotInstalled("it") from _Psutil.missing


def _bind_psutil(mod, process=None):
    """Takes ``mod`` as psutil, and ``process`` (else ``mod.Process``) as its own Process
    class (one who replaces psutil.Process with this module's gives the one it replaced)."""
    process = process or mod.Process
    if isinstance(process, type) and issubclass(process, Process):
        raise RuntimeError(
            "taskdiag.psutil: psutil.Process is taskdiag's: call"
            " taskdiag.psutil._bind_psutil(psutil, psutils_own_Process) before replacing it"
        )
    _Psutil.module, _Psutil.process = mod, process
    _adopt_psutil_exceptions(mod)


def __getattr__(name):
    """psutil's own names, passed through (PEP 562)."""
    if name == "__all__":
        return _OWN_ALL + sorted(_PSUTIL_ALL - set(_OWN_ALL)) if _psutil_installed() else list(
            _OWN_ALL
        )
    if name.startswith("__") and name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name.startswith("RLIMIT_") or name == "RLIM_INFINITY":
        import resource

        if hasattr(resource, name):
            return getattr(resource, name)
    try:
        mod = _psutil().module
    except PsutilNotInstalled:
        if name in _PSUTIL_ALL:
            raise PsutilNotInstalled(f"taskdiag.psutil.{name}") from None
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    try:
        return getattr(mod, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__():
    names = set(globals())
    if _psutil_installed():
        names |= _PSUTIL_ALL
    return sorted(names)


def _psutil_installed():
    """Whether psutil can be imported (without importing it)."""
    if _Psutil.module is not None:
        return True
    if _Psutil.missing is not None:
        return False
    if _Psutil.installed is None:
        import importlib.util

        try:
            _Psutil.installed = importlib.util.find_spec("psutil") is not None
        except (ImportError, ValueError):
            _Psutil.installed = False
    return _Psutil.installed


# --- exceptions ------------------------------------------------------------------------


def _adopt_psutil_exceptions(mod=None):
    """Makes the exceptions subclasses of psutil's own (``mod``, else psutil if imported),
    so that ``except psutil.NoSuchProcess`` catches them."""
    if _Psutil.adopted:
        return
    mod = mod or sys.modules.get("psutil")
    if mod is None:
        return
    theirs = [getattr(mod, n, None) for n in
              ("Error", "NoSuchProcess", "ZombieProcess", "AccessDenied", "TimeoutExpired")]
    if None in theirs or any(not isinstance(c, type) or issubclass(c, Error) for c in theirs):
        return  # psutil half imported, or this module standing in for it
    err, nsp, zombie, denied, timeout = theirs
    Error.__bases__ = (err,)
    NoSuchProcess.__bases__ = (Error, nsp)
    ZombieProcess.__bases__ = (NoSuchProcess, zombie)
    AccessDenied.__bases__ = (Error, denied)
    TimeoutExpired.__bases__ = (Error, timeout)
    _Psutil.adopted = True
    _Caught.gone, _Caught.zombie, _Caught.denied = nsp, zombie, denied


class _ExceptionBase(Exception):
    """An Exception subclass laid out as psutil.Error is, which Error can trade for it."""


class Error(_ExceptionBase):
    """Base exception class (a psutil.Error once psutil is imported)."""

    def __init__(self, *args):
        if not _Psutil.adopted:
            _adopt_psutil_exceptions()
        Exception.__init__(self, *args)

    def _infodict(self, attrs):
        info = collections.OrderedDict()
        for name in attrs:
            value = getattr(self, name, None)
            if value or (name == "pid" and value == 0):
                info[name] = value
        return info

    def __str__(self):
        info = self._infodict(("pid", "ppid", "name"))
        details = "({})".format(", ".join(f"{k}={v!r}" for k, v in info.items())) if info else None
        return " ".join(x for x in (getattr(self, "msg", ""), details) if x)

    def __repr__(self):
        info = self._infodict(("pid", "ppid", "name", "seconds", "msg"))
        details = ", ".join(f"{k}={v!r}" for k, v in info.items())
        return f"psutil.{self.__class__.__name__}({details})"


class NoSuchProcess(Error):
    """The process no longer exists (or its pid now belongs to another process)."""

    def __init__(self, pid, name=None, msg=None):
        Error.__init__(self)
        self.pid, self.name = pid, name
        self.msg = msg or "process no longer exists"

    def __reduce__(self):
        return (self.__class__, (self.pid, self.name, self.msg))


class ZombieProcess(NoSuchProcess):
    """The process is a zombie: it exited and waits for its parent."""

    def __init__(self, pid, name=None, ppid=None, msg=None):
        NoSuchProcess.__init__(self, pid, name, msg)
        self.ppid = ppid
        self.msg = msg or "PID still exists but it's a zombie"

    def __reduce__(self):
        return (self.__class__, (self.pid, self.name, self.ppid, self.msg))


class AccessDenied(Error):
    """/proc refuses this caller what was asked."""

    def __init__(self, pid=None, name=None, msg=None):
        Error.__init__(self)
        self.pid, self.name, self.msg = pid, name, msg or ""

    def __reduce__(self):
        return (self.__class__, (self.pid, self.name, self.msg))


class TimeoutExpired(Error):
    """wait() timed out."""

    def __init__(self, seconds, pid=None, name=None):
        Error.__init__(self)
        self.seconds, self.pid, self.name = seconds, pid, name
        self.msg = f"timeout after {seconds} seconds"

    def __reduce__(self):
        return (self.__class__, (self.seconds, self.pid, self.name))


class _Caught:
    """What a method that is not this module's own (a subclass's, a patch) may raise for a
    process that is gone, a zombie, or refused: psutil's own classes once psutil is imported
    (this module's are their subclasses), as psutil's as_dict() catches them."""

    gone, zombie, denied = NoSuchProcess, ZombieProcess, AccessDenied


_adopt_psutil_exceptions()


# --- named tuples (psutil's, Linux) ----------------------------------------------------

_nt = collections.namedtuple
pcputimes = _nt("pcputimes", ("user", "system", "children_user", "children_system", "iowait"))
pmem = _nt("pmem", ("rss", "vms", "shared", "text", "lib", "data", "dirty"))
pfullmem = _nt("pfullmem", pmem._fields + ("uss", "pss", "swap"))
puids = _nt("puids", ("real", "effective", "saved"))
pgids = _nt("pgids", ("real", "effective", "saved"))
pio = _nt(
    "pio",
    ("read_count", "write_count", "read_bytes", "write_bytes", "read_chars", "write_chars"),
)
pctxsw = _nt("pctxsw", ("voluntary", "involuntary"))
pthread = _nt("pthread", ("id", "user_time", "system_time"))
pmmap_grouped = _nt(
    "pmmap_grouped",
    ("path", "rss", "size", "pss", "shared_clean", "shared_dirty", "private_clean",
     "private_dirty", "referenced", "anonymous", "swap"),
)
pmmap_ext = _nt("pmmap_ext", "addr perms " + " ".join(pmmap_grouped._fields))


def _environ(entries):
    return dict(e.split("=", 1) for e in entries)


# How an attribute's columns become its value: a named tuple of them, or a conversion.
_MAKE = {
    "cpu_times": pcputimes,
    "memory_info": pmem,
    "uids": puids,
    "gids": pgids,
    "io_counters": pio,
    "num_ctx_switches": pctxsw,
    "environ": _environ,
}

# psutil's Process attributes (as_dict's names), and which of them taskdiag computes
# rather than reads.
_PSUTIL_ATTRS = frozenset(
    [
        "cmdline", "cpu_affinity", "cpu_num", "cpu_percent", "cpu_times", "create_time", "cwd",
        "environ", "exe", "gids", "io_counters", "ionice", "memory_full_info", "memory_info",
        "memory_maps", "memory_percent", "name", "net_connections", "nice", "num_ctx_switches",
        "num_fds", "num_threads", "open_files", "pid", "ppid", "status", "terminal", "threads",
        "uids", "username",
    ]
)
_COLUMNS = _taskdiag.attributes()
_GROUPS = _taskdiag.attribute_groups()
# psutil's own Process answers these (no taskdiag group carries them; see _fallback).
_FALLBACK = frozenset(["ionice", "net_connections", "open_files"])
_COMPUTED = frozenset(["cpu_percent", "threads", "memory_maps", "memory_full_info"]) | _FALLBACK


def _check_attrs(attrs):
    """psutil's attribute names, validated: ValueError for unknown ones; PsutilNotInstalled
    for those psutil answers where it is not installed (None, or an empty list, is every
    attribute: without psutil, every one but those)."""
    if attrs is None or (not attrs and isinstance(attrs, (list, tuple, set, frozenset))):
        if _psutil_installed():
            return sorted(_PSUTIL_ATTRS)
        return sorted(_PSUTIL_ATTRS - _FALLBACK)
    if not isinstance(attrs, (list, tuple, set, frozenset)):
        raise TypeError(f"invalid attrs type {type(attrs)}")
    attrs = list(attrs)
    bad = [a for a in attrs if a not in _PSUTIL_ATTRS]
    if bad:
        raise ValueError(
            f"invalid attr name{'s' if len(bad) > 1 else ''} "
            f"{', '.join(map(repr, bad))}; valid are: {', '.join(sorted(_PSUTIL_ATTRS))}"
        )
    for a in attrs:
        if a in _FALLBACK:
            try:
                _psutil()
            except PsutilNotInstalled:
                raise PsutilNotInstalled(f"Process.{a}()") from None
    return attrs


# The value a null cell takes in a single-process call: raised as AccessDenied or
# ZombieProcess (terminal's null is None).
_NULL = object()
_UNSET = object()
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_NS_PER_TICK = 10**9 // _CLK_TCK


def _mono(ns):
    """A start time (ns since boot, at clock-tick resolution) as psutil's identity has it:
    seconds since boot, the ticks over CLK_TCK (the same float psutil computes)."""
    return None if ns is None else (ns // _NS_PER_TICK) / _CLK_TCK


# The largest pid the kernel can have (PID_MAX_LIMIT); larger ones name no process.
_PID_MAX = 4 * 1024 * 1024


def _plan(attrs):
    """What _psutil_rows makes of ``attrs``: each with its columns, and whether its null is
    None (terminal: no terminal) rather than a refusal."""
    return [(a, _COLUMNS[a], a == "terminal") for a in attrs if a in _COLUMNS]


def _refusal_class(status, refused_groups, attr):
    """What psutil raises where ``attr`` is null: AccessDenied where /proc refused the
    caller (``refused_groups``), ZombieProcess where a zombie has no such value."""
    if refused_groups & _GROUPS[attr] or status != STATUS_ZOMBIE:
        return AccessDenied
    return ZombieProcess


def _exe_answer(exe, cmdline, exe_refusal, cmdline_refusal):
    """psutil's exe() from the link and the command line read (``_NULL`` where null) and the
    class psutil raises for each where it is null: the path, or the exception class psutil
    raises. Where the link is refused or empty psutil guesses the first argument, when that
    is an absolute path to an executable file; guessing for an empty link, it swallows the
    command line's AccessDenied, not its ZombieProcess."""
    if exe is not _NULL and exe != "":
        return exe
    if exe is _NULL and exe_refusal is ZombieProcess:
        return ZombieProcess
    if cmdline is _NULL:
        return "" if exe == "" and cmdline_refusal is AccessDenied else cmdline_refusal
    guess = _guess_exe(cmdline)
    if guess is not None:
        return guess
    return exe_refusal if exe is _NULL else exe


def _guess_exe(cmdline):
    """psutil's guess of a program from its command line: the first argument, if it is an
    absolute path to an executable file."""
    if cmdline:
        exe = cmdline[0]
        if os.path.isabs(exe) and os.path.isfile(exe) and os.access(exe, os.X_OK):
            return exe
    return None


def _negsignal(code):
    """A negative exit code as psutil gives it: -signal, as its Negsignal enum when
    psutil is installed."""
    try:
        _psutil()
        from psutil._psposix import Negsignal

        return Negsignal(code)
    except (ImportError, ValueError):
        return code


def _cpu_count():
    return os.cpu_count() or 1


# --- Process ---------------------------------------------------------------------------


class Process:
    """A process, identified by its pid and creation time (psutil.Process's API).

    Each method reads the process again, in one taskdiag request; a method of a process whose
    pid now belongs to another one raises NoSuchProcess.
    """

    # The process of a Process made from a thread id (None: its pid; process_iter() makes
    # only processes, and sets no more than it must on each of them).
    _tgid = None
    # psutil's own Process of this process, for what no taskdiag group carries (_theirs).
    _ps = None
    # Whether name() answered (str() shows the name it gave then, as psutil's).
    _named = False

    def __init__(self, pid=None):
        self._init(pid)

    def _init(self, pid, _ignore_nsp=False):
        """(Re)reads the process's identity (psutil's own test helpers call it to start over)."""
        if pid is None:
            pid = os.getpid()
        if isinstance(pid, bool) or not isinstance(pid, int):
            raise TypeError(f"pid must be an integer (got {pid!r})")
        if pid < 0:
            raise ValueError(f"pid must be a positive integer (got {pid})")
        self._pid = pid
        self._name = None
        self._ppid = None
        self._named = False
        self._last = None
        self._oneshot = None
        self._exitcode = _UNSET
        self._ps = None
        if pid > _PID_MAX:
            raise NoSuchProcess(pid, None, "process PID not found")
        self._ident = (pid, None)
        self._create_time = None
        try:
            row = self._read(["create_time", "name", "ppid", "tgid"], check=False)
        except NoSuchProcess:
            if not _ignore_nsp:
                raise
            return
        self._name, self._ppid, self._tgid = row["name"], row["ppid"], row["tgid"]
        self._create_time = row["create_time"]
        self._ident = (pid, _mono(row["start_time_ns"]))

    @classmethod
    def _of(cls, pid, start_ns, name=None, ppid=None, create_time=None, info=None):
        p = object.__new__(cls)
        p._pid, p._name, p._ppid, p._create_time = pid, name, ppid, create_time
        p._ident = (pid, _mono(start_ns))
        p._last = None
        p._oneshot = None
        p._exitcode = _UNSET
        if info is not None:
            p.info = info
        return p

    def _read(self, attrs, check=True, fresh=False):
        """One request for this process: a dict of attribute to value (_NULL where null);
        from the oneshot() read when there is one, unless ``fresh``. With ``check``, a
        process whose pid now belongs to another one (another start time) raises
        NoSuchProcess."""
        if not fresh and self._oneshot is not None and all(a in self._oneshot for a in attrs):
            return self._oneshot
        want = list(attrs) + ["start_time_ns", "status", "name", "ppid", "refused_groups"]
        # The task as /proc/PID shows it: a process, or a thread by its id (as psutil's).
        t = _taskdiag.task(sorted(set(want)), self._pid, BACKEND)
        rows = t._psutil_rows(_plan(dict.fromkeys(want)), _NULL, _MAKE)
        if not rows:
            raise NoSuchProcess(self._pid, self._name, "process PID not found")
        row = rows[0]
        if check and self._start is not None and _mono(row["start_time_ns"]) != self._start:
            raise NoSuchProcess(
                self._pid, self._name, "process no longer exists (its PID was reused)"
            )
        if "num_fds" in attrs and row["num_fds"] is not _NULL and self._is_own():
            row["num_fds"] = self._own_num_fds()
        return row

    def _is_own(self):
        """Whether this is the caller's own process (or one of its threads)."""
        me = os.getpid()
        return self._pid == me or self._tgid == me

    def _own_num_fds(self):
        """The caller's own open descriptors as its program has them: taskdiag's kept
        backend closed first (its BPF programs and maps, a daemon connection), then counted
        as psutil counts them."""
        try:
            return _own_fd_count()
        except FileNotFoundError:
            raise NoSuchProcess(self._pid, self._name) from None

    # what psutil's own Process answers

    def _theirs(self):
        """psutil's own Process of this process: made once, and taken only if this process
        still holds its pid after it was made (then it was this one psutil's read)."""
        p = self._ps
        if p is None:
            ps = _psutil()
            try:
                p = ps.process(self._pid)
            except ps.module.Error as err:
                raise self._ours(err) from None
            self._check_identity()
            self._ps = p
        return p

    def _ours(self, err):
        """This module's exception for psutil's ``err`` (of this process)."""
        if isinstance(err, Error):
            return err
        ps = _Psutil.module
        if isinstance(err, ps.ZombieProcess):
            return ZombieProcess(self._pid, self._name, self._ppid)
        if isinstance(err, ps.NoSuchProcess):
            return NoSuchProcess(self._pid, self._name)
        if isinstance(err, ps.AccessDenied):
            return AccessDenied(self._pid, self._name)
        if isinstance(err, ps.TimeoutExpired):
            return TimeoutExpired(err.seconds, self._pid, self._name)
        return err

    def _fallback(self, method, *args, **kwargs):
        """psutil's own Process's ``method``: its answer, if this process still holds its
        pid after it (then it was this one psutil read), else NoSuchProcess."""
        p = self._theirs()
        try:
            out = getattr(p, method)(*args, **kwargs)
        except _Psutil.module.Error as err:
            raise self._ours(err) from None
        self._check_identity()
        return out

    def _raised(self, cls, row):
        """An AccessDenied or ZombieProcess of this process, as ``row`` names it."""
        if cls is ZombieProcess:
            return ZombieProcess(self._pid, row["name"], row["ppid"])
        return AccessDenied(self._pid, row["name"])

    def _refusal(self, row, attr):
        """The exception psutil raises where ``attr`` is null in ``row``."""
        return self._raised(_refusal_class(row["status"], row["refused_groups"], attr), row)

    def _get(self, attr):
        row = self._read([attr])
        v = row[attr]
        if v is _NULL:
            raise self._refusal(row, attr)
        return v

    def _exe(self, row):
        """psutil's exe() from ``row`` (see _exe_answer)."""
        status, refused = row["status"], row["refused_groups"]
        answer = _exe_answer(
            row["exe"],
            row["cmdline"],
            _refusal_class(status, refused, "exe"),
            _refusal_class(status, refused, "cmdline"),
        )
        if isinstance(answer, type):
            raise self._raised(answer, row)
        return answer

    # identity

    @property
    def _start(self):
        """The start time this object stands for, seconds since boot at clock-tick resolution
        (with the pid, its identity, psutil's ``_ident``: unlike create_time, it does not move
        when the clock is set)."""
        return self._ident[1]

    @property
    def pid(self):
        """The process id."""
        return self._pid

    def __eq__(self, other):
        if not isinstance(other, Process):
            return NotImplemented
        return self._ident == other._ident

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(self._ident)

    def __str__(self):
        info = collections.OrderedDict(pid=self._pid)
        if self._named:
            info["name"] = self._name
        # name() and status() (a subclass's, as psutil's str() calls them), from one read.
        outer = self._oneshot
        try:
            if outer is None:
                self._oneshot = self._read(["name", "status"])
            info["name"] = self.name()
            info["status"] = self.status()
        except _Caught.zombie:
            info["status"] = STATUS_ZOMBIE
        except _Caught.gone:
            info["status"] = "terminated"
        except _Caught.denied:
            pass
        finally:
            self._oneshot = outer
        if self._exitcode not in (_UNSET, None):
            info["exitcode"] = self._exitcode
        if self._create_time is not None:
            info["started"] = time.strftime(
                "%H:%M:%S" if time.time() - self._create_time < 86400 else "%Y-%m-%d %H:%M:%S",
                time.localtime(self._create_time),
            )
        body = ", ".join(f"{k}={v!r}" for k, v in info.items())
        return f"taskdiag.psutil.Process({body})"

    __repr__ = __str__

    @contextlib.contextmanager
    def oneshot(self):
        """Read every attribute once, in one request, and answer the methods called inside
        the block from that read."""
        if self._oneshot is not None:
            yield
            return
        self._oneshot = self._read(sorted(_COLUMNS))
        try:
            yield
        finally:
            self._oneshot = None

    def as_dict(self, attrs=None, ad_value=None):
        """The attributes ``attrs`` (all for None) as a dict, ``ad_value`` for those /proc
        refuses (AccessDenied) or a zombie has not (ZombieProcess)."""
        names = _check_attrs(attrs)
        # What a subclass (or a patch) overrides is its method's answer, as psutil's as_dict()
        # calls every method; the rest comes from one read.
        called = _overridden(type(self), names)
        read = [a for a in names if a in _COLUMNS and a not in called]
        row = self._read(read + ["cmdline"] * ("exe" in read))
        out = {}
        for a in names:
            if a in called:
                try:
                    out[a] = getattr(self, a)()
                except (_Caught.denied, _Caught.zombie):
                    out[a] = ad_value
                except NotImplementedError:
                    # As psutil: raised where these attributes were asked for, else left out.
                    if attrs:
                        raise
                    continue
            elif a == "exe":
                try:
                    out[a] = self._exe(row)
                except (AccessDenied, ZombieProcess):
                    out[a] = ad_value
            elif a == "cpu_percent":
                out[a] = self.cpu_percent()
            elif a in _COMPUTED:
                try:
                    out[a] = getattr(self, a)()
                except (AccessDenied, ZombieProcess):
                    out[a] = ad_value
            else:
                v = row[a]
                out[a] = ad_value if v is _NULL and a != "terminal" else (None if v is _NULL else v)
        return out

    # attributes read from the process

    def name(self):
        """The process name (psutil's rule for 15-character names)."""
        self._name = self._get("name")
        self._named = True
        return self._name

    def exe(self):
        """The executable's path ("" for a kernel thread)."""
        return self._exe(self._read(["exe", "cmdline"]))

    def cmdline(self):
        """The command line, a list of strings."""
        return self._get("cmdline")

    def environ(self):
        """The environment, a dict."""
        return self._get("environ")

    def status(self):
        """The status, one of the STATUS_* strings."""
        return self._get("status")

    def create_time(self):
        """The start time, seconds since the epoch (kept from the first read, as psutil's)."""
        if self._create_time is None:
            self._create_time = self._read(["create_time"])["create_time"]
        return self._create_time

    def ppid(self):
        """The parent's pid."""
        self._ppid = self._get("ppid")
        return self._ppid

    def cwd(self):
        """The working directory."""
        return self._get("cwd")

    def uids(self):
        """The real, effective and saved uids."""
        return self._get("uids")

    def gids(self):
        """The real, effective and saved gids."""
        return self._get("gids")

    def username(self):
        """The name of the real uid's user."""
        return self._get("username")

    def terminal(self):
        """The controlling terminal's path, or None."""
        v = self._read(["terminal"])["terminal"]
        return None if v is _NULL else v

    def nice(self, value=None):
        """The nice value; with ``value``, set it."""
        if value is None:
            return self._get("nice")
        self._check_identity()
        try:
            os.setpriority(os.PRIO_PROCESS, self._pid, value)
        except OSError as err:
            raise self._translate(err) from err
        return None

    def num_threads(self):
        """The number of threads."""
        return self._get("num_threads")

    def num_fds(self):
        """The number of open file descriptors (the caller's own: its program's, taskdiag's
        kept backend closed first)."""
        return self._get("num_fds")

    def num_ctx_switches(self):
        """Voluntary and involuntary context switches."""
        return self._get("num_ctx_switches")

    def io_counters(self):
        """I/O counters."""
        return self._get("io_counters")

    def cpu_num(self):
        """The CPU the process last ran on."""
        return self._get("cpu_num")

    def cpu_affinity(self, cpus=None):
        """The CPUs the process may run on; with ``cpus``, set them (an empty list: all)."""
        if cpus is None:
            return sorted(set(self._get("cpu_affinity")))
        self._check_identity()
        eligible = sorted(os.sched_getaffinity(0) | set(range(_cpu_count())))
        if not cpus:
            cpus = eligible
        for cpu in cpus:
            if isinstance(cpu, bool) or not isinstance(cpu, int) or cpu not in eligible:
                raise ValueError(f"invalid CPU {cpu!r}; choose between {eligible}")
        try:
            os.sched_setaffinity(self._pid, cpus)
        except OSError as err:
            raise self._translate(err) from err
        return None

    def cpu_times(self):
        """User, system, children's and I/O-wait times, seconds."""
        return self._get("cpu_times")

    def memory_info(self):
        """rss, vms, shared, text, lib, data, dirty, bytes."""
        return self._get("memory_info")

    def memory_full_info(self):
        """memory_info() plus uss (private memory), pss and swap, bytes, summed over the
        mappings' smaps counters (psutil reads smaps_rollup, whose totals are not rounded to
        kB per mapping: they can differ by a few kB)."""
        mem = self.memory_info()
        uss = pss = swap = 0
        try:
            maps = self.memory_maps(grouped=False)
        except ZombieProcess:
            maps = []  # psutil reads a zombie's empty smaps: zeros
        for m in maps:
            uss += m.private_clean + m.private_dirty
            pss += m.pss
            swap += m.swap
        return pfullmem(*mem, uss, pss, swap)

    def memory_percent(self, memtype="rss"):
        """A memory_full_info() field (resident memory by default) as a percentage of
        physical memory."""
        if memtype not in pfullmem._fields:
            raise ValueError(f"invalid memtype {memtype!r}; valid types are {pfullmem._fields!r}")
        if memtype == "rss":
            return self._get("memory_percent")
        mem = self.memory_info() if memtype in pmem._fields else self.memory_full_info()
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return (getattr(mem, memtype) / float(total)) * 100

    def rlimit(self, resource, limits=None):
        """The (soft, hard) limit of ``resource`` (a resource.RLIMIT_* constant); with
        ``limits``, set it (prlimit, as psutil)."""
        import resource as _resource

        if self._pid == 0:
            # prlimit() of pid 0 is the caller's own.
            raise ValueError("can't use prlimit() against PID 0 process")
        if limits is not None and len(limits) != 2:
            raise ValueError(f"second argument must be a (soft, hard) tuple, got {limits!r}")
        try:
            # Read first (a bad resource is a ValueError, as psutil's), then taken only if
            # this process still holds its pid; set only once it is known to.
            current = _resource.prlimit(self._pid, resource)
            self._check_identity()
            if limits is None:
                return current
            _resource.prlimit(self._pid, resource, limits)
            return None
        except OSError as err:
            raise self._translate(err) from err

    def ionice(self, ioclass=None, value=None):
        """The I/O priority (class, value); with ``ioclass``, set it. psutil's own (no
        taskdiag group carries it)."""
        if ioclass is None:
            if value is not None:
                raise ValueError("'ioclass' argument must be specified")
            return self._fallback("ionice")
        return self._fallback("ionice", ioclass, value)

    def open_files(self):
        """Regular files open, (path, fd, position, mode, flags). psutil's own (no taskdiag
        group carries open files' paths)."""
        return self._fallback("open_files")

    def net_connections(self, kind="inet"):
        """Sockets open, of ``kind`` ('inet', 'tcp', 'unix', 'all'...). psutil's own (no
        taskdiag group carries sockets)."""
        return self._fallback("net_connections", kind)

    def connections(self, kind="inet"):
        """net_connections(), under its old name (deprecated, as psutil's)."""
        return self._fallback("connections", kind)

    def threads(self):
        """The threads (of the whole process, for a Process of a thread id, as psutil's): id,
        user and system time, seconds."""
        t = _taskdiag.snapshot(["start_time_ns", "cpu_times"], True, [self._tgid or self._pid], BACKEND)
        rows = t.to_dicts()
        leader = [r for r in rows if r["pid"] == self._pid]
        if not leader or _mono(leader[0]["start_time_ns"]) != self._start:
            raise NoSuchProcess(self._pid, self._name)
        out = []
        for r in rows:
            if r["cpu_times.user"] is None:
                raise AccessDenied(self._pid, self._name)
            out.append(pthread(r["pid"], r["cpu_times.user"], r["cpu_times.system"]))
        # psutil sorts the names of /proc/PID/task: as strings.
        out.sort(key=lambda t: str(t.id))
        return out

    def memory_maps(self, grouped=True):
        """The memory mappings with their smaps counters (bytes): one pmmap_grouped per path
        (``grouped``), else one pmmap_ext per mapping. A thread id's are its process's (as
        psutil reads /proc/TID/smaps); the caller's own are its program's, taskdiag's kept
        backend (its BPF maps) closed first."""
        # taskdiagd does not serve smaps counters: the caller's own /proc does, as psutil reads it.
        backend = "procfs" if BACKEND == "daemon" else BACKEND
        own = self._is_own()
        if own:
            # The program's own mappings: taskdiag's kept backend (a BPF map is mapped here)
            # closed first, and nothing kept after.
            _taskdiag.release()
            backend = "procfs"
        # A thread id's are its process's (psutil reads /proc/TID/smaps, the same address
        # space): read while the thread, this one by its start time, lives before and after.
        thread = self._tgid is not None and self._tgid != self._pid
        if thread:
            self._check_identity()
        try:
            found = _taskdiag.memory_maps(self._tgid if thread else self._pid, backend)
        finally:
            if own:
                _taskdiag.release()
        if found is None:
            raise NoSuchProcess(self._pid, self._name)
        start, status, refused, maps = found
        if thread:
            self._check_identity()
        elif _mono(start) != self._start:
            raise NoSuchProcess(self._pid, self._name, "process no longer exists (its PID was reused)")
        if maps is None:
            if refused or status != STATUS_ZOMBIE:
                raise AccessDenied(self._pid, self._name)
            raise ZombieProcess(self._pid, self._name, self._ppid)
        if not grouped:
            return [pmmap_ext(addr, perms, path, *nums) for addr, perms, path, nums in maps]
        sums = {}
        for _, _, path, nums in maps:
            if path in sums:
                sums[path] = [a + b for a, b in zip(sums[path], nums)]
            else:
                sums[path] = list(nums)
        return [pmmap_grouped(path, *nums) for path, nums in sums.items()]

    def cpu_percent(self, interval=None):
        """CPU use since the last call (or over ``interval`` seconds), in percent of one CPU
        (psutil's definition: above 100 for a process running on several CPUs)."""
        if interval is not None and interval < 0:
            raise ValueError(f"interval is not positive (got {interval!r})")
        ncpu = _cpu_count()

        def timer():
            return time.monotonic() * ncpu

        if interval is not None and interval > 0.0:
            st1, pt1 = timer(), self.cpu_times()
            time.sleep(interval)
        else:
            st1, pt1 = self._last if self._last else (None, None)
        st2, pt2 = timer(), self.cpu_times()
        self._last = (st2, pt2)
        if st1 is None:
            return 0.0
        # Never below 0: the BPF backend's user/system split can move a tick back between
        # two reads (it cannot record the split /proc remembers, prev_cputime).
        delta_proc = max(0.0, (pt2.user - pt1.user) + (pt2.system - pt1.system))
        delta_time = st2 - st1
        try:
            overall = (delta_proc / delta_time) * 100
        except ZeroDivisionError:
            return 0.0
        return round(overall * ncpu, 1)

    # family

    def parent(self):
        """The parent Process, or None (none, or started after this one)."""
        ppid = self.ppid()
        if not ppid:
            return None
        try:
            parent = Process(ppid)
        except NoSuchProcess:
            return None
        if parent._start is not None and self._start is not None and parent._start > self._start:
            return None
        return parent

    def parents(self):
        """Every ancestor, the parent first."""
        out, p = [], self.parent()
        while p is not None:
            out.append(p)
            p = p.parent()
        return out

    def children(self, recursive=False):
        """The child processes (with ``recursive``, every descendant), as Process objects."""
        self._check_identity()
        t = _taskdiag.snapshot(["ppid", "start_time_ns", "create_time", "name"], False, None,
                               BACKEND)
        by_parent = collections.defaultdict(list)
        for pid, ppid, start, ctime, name in zip(
            t.column("pid"), t.column("ppid"), t.column("start_time_ns"),
            t.column("create_time"), t.column("name"),
        ):
            by_parent[ppid].append((pid, start, ctime, name, ppid))
        out, seen = [], set()
        todo = [(self._pid, self._start)]
        while todo:
            pid, start = todo.pop(0)
            for cpid, cstart, ctime, name, ppid in by_parent.get(pid, ()):
                # A child started before its parent is a reused pid's, not this one's.
                if cpid in seen or (start is not None and _mono(cstart) < start):
                    continue
                seen.add(cpid)
                out.append(Process._of(cpid, cstart, name, ppid, ctime))
                if recursive:
                    todo.append((cpid, _mono(cstart)))
        return out

    # life

    def is_running(self):
        """Whether the process still runs (a zombie does): the same pid and creation time."""
        try:
            row = self._read(["start_time_ns"], check=False, fresh=True)
            return _mono(row["start_time_ns"]) == self._start
        except NoSuchProcess:
            return False

    def _check_identity(self):
        if not self.is_running():
            raise NoSuchProcess(self._pid, self._name)

    def _translate(self, err):
        if isinstance(err, ProcessLookupError):
            return NoSuchProcess(self._pid, self._name)
        if isinstance(err, PermissionError):
            return AccessDenied(self._pid, self._name)
        return err

    def _pidfd(self):
        """A pidfd of this very process: opened, then checked to be the same process (a pid
        reused in between is refused, never signalled)."""
        try:
            fd = os.pidfd_open(self._pid)
        except OSError as err:
            raise self._translate(err) from err
        try:
            self._check_identity()
        except BaseException:
            os.close(fd)
            raise
        return fd

    def send_signal(self, sig):
        """Sends ``sig`` through a pidfd, so a reused pid is never signalled."""
        fd = self._pidfd()
        try:
            import signal

            signal.pidfd_send_signal(fd, sig)
        except OSError as err:
            raise self._translate(err) from err
        finally:
            os.close(fd)

    def suspend(self):
        """SIGSTOP."""
        import signal

        self.send_signal(signal.SIGSTOP)

    def resume(self):
        """SIGCONT."""
        import signal

        self.send_signal(signal.SIGCONT)

    def terminate(self):
        """SIGTERM."""
        import signal

        self.send_signal(signal.SIGTERM)

    def kill(self):
        """SIGKILL."""
        import signal

        self.send_signal(signal.SIGKILL)

    def wait(self, timeout=None):
        """Waits for the process to end and returns its exit code if it is a child of this
        process (reaped here; a negative signal number if a signal ended it), else None once
        its pid is gone. TimeoutExpired after ``timeout`` seconds."""
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout must be an int or float (got {type(timeout)})")
            if timeout < 0:
                raise ValueError(f"timeout must be positive or zero (got {timeout})")
        if self._pid == 0:
            raise ValueError("can't wait for PID 0")
        if self._exitcode is not _UNSET:
            return self._exitcode
        deadline = None if timeout is None else time.monotonic() + timeout

        def left():
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        try:
            fd = self._pidfd()
        except NoSuchProcess:
            # Gone, or its pid is another process's now: nothing of ours to wait for (and
            # nothing to reap: that pid is not this process).
            self._exitcode = None
            return None
        try:
            # A pidfd is readable once the process has exited (a zombie).
            import select

            if not select.select([fd], [], [], left())[0]:
                raise TimeoutExpired(timeout, self._pid, self._name)
            # Reaped through the pidfd: never another process that took the pid since.
            try:
                info = os.waitid(os.P_PIDFD, fd, os.WEXITED)
            except ChildProcessError:
                info = None
        finally:
            os.close(fd)
        if info is not None:
            if info.si_code == os.CLD_EXITED:
                self._exitcode = info.si_status
            else:
                self._exitcode = _negsignal(-info.si_status)
            return self._exitcode
        # Not our child: gone once its parent has reaped it (as psutil waits), polled.
        delay = 0.0001
        while self.is_running():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutExpired(timeout, self._pid, self._name)
            time.sleep(min(delay, left() if deadline is not None else delay))
            delay = min(delay * 2, 0.04)
        self._exitcode = None
        return None


# Process's own methods of psutil's attributes: another one (a subclass's, a patch) is called.
_OWN_METHODS = {a: vars(Process)[a] for a in _PSUTIL_ATTRS if a != "pid"}
_OWN_AS_DICT = Process.as_dict


def _overridden(cls, names):
    """The attributes of ``names`` whose method ``cls`` has from elsewhere than Process."""
    own = _OWN_METHODS
    return [a for a in names if a in own and getattr(cls, a, None) is not own[a]]


class Popen(Process):
    """A subprocess.Popen that is a taskdiag Process too (psutil.Popen's API): Process's
    methods, and subprocess.Popen's attributes (``stdout``, ``communicate()``, ``poll()``,
    ``returncode``...) for what Process does not have. ``send_signal``, ``terminate`` and
    ``kill`` are Process's (a pidfd: a reused pid is never signalled); ``wait()`` reaps the
    child and sets subprocess.Popen's ``returncode``."""

    def __init__(self, *args, **kwargs):
        import subprocess

        self.__subproc = subprocess.Popen(*args, **kwargs)
        # A child that ends before it is read is still this Popen (psutil #193).
        self._init(self.__subproc.pid, _ignore_nsp=True)

    def __dir__(self):
        import subprocess

        return sorted(set(dir(Popen) + dir(subprocess.Popen)))

    def __enter__(self):
        self.__subproc.__enter__()
        return self

    def __exit__(self, *args, **kwargs):
        return self.__subproc.__exit__(*args, **kwargs)

    def __getattribute__(self, name):
        try:
            return object.__getattribute__(self, name)
        except AttributeError:
            try:
                return object.__getattribute__(object.__getattribute__(self, "_Popen__subproc"),
                                               name)
            except AttributeError:
                raise AttributeError(f"{self.__class__!r} has no attribute {name!r}") from None

    def wait(self, timeout=None):
        """Waits for the child to end (Process.wait) and returns its exit code, which
        subprocess.Popen's ``returncode`` then has too."""
        if self.__subproc.returncode is not None:
            return self.__subproc.returncode
        ret = super().wait(timeout)
        self.__subproc.returncode = ret
        return ret


# --- module functions ------------------------------------------------------------------

_cache = {}


def process_iter(attrs=None, ad_value=None):
    """Every running process, in pid order, read in one taskdiag request.

    With ``attrs``, each Process has an ``info`` dict of those attributes (``ad_value`` where
    /proc refuses one or the process is a zombie). Process objects are reused across calls
    while their process lives (``process_iter.cache_clear()`` forgets them).
    """
    names = None if attrs is None else _check_attrs(attrs)
    # Where Process.as_dict or a method of those attributes is not this module's own (a
    # patch), each process's info is its as_dict(), as psutil makes it.
    each = names is not None and (Process.as_dict is not _OWN_AS_DICT or _overridden(Process, names))
    read = [a for a in (names or ()) if a in _COLUMNS and not each]
    extra = ["start_time_ns", "create_time", "name", "ppid"]
    if "exe" in read:
        extra += ["cmdline", "status", "refused_groups"]
    t = _taskdiag.snapshot(read + extra, False, None, BACKEND)
    pids = t.column("pid")
    for gone in _cache.keys() - set(pids):
        del _cache[gone]
    rows = t._psutil_rows(_plan(read), ad_value, _MAKE) if names is not None and not each else None
    if "exe" in read:
        _fix_exe(t, rows, ad_value)
    if "num_fds" in read:
        _fix_own_num_fds(pids, rows)
    computed = [a for a in (names or ()) if a in _COMPUTED and not each]
    # Every Process object is made before the first is yielded, with the cyclic garbage
    # collector paused (it would walk every young object many times over; none of these
    # can form a cycle): the snapshot is taken already, only the objects are left to make.
    procs = []
    paused = gc.isenabled()
    gc.disable()
    try:
        new, cache, append = object.__new__, _cache, procs.append
        per_tick, tck = _NS_PER_TICK, _CLK_TCK
        for i, (pid, start, ctime, name, ppid) in enumerate(
            zip(pids, t.column("start_time_ns"), t.column("create_time"), t.column("name"),
                t.column("ppid"))
        ):
            p = cache.get(pid)
            start = (start // per_tick) / tck
            if p is None or p._ident[1] != start:
                p = new(Process)
                p._pid, p._last, p._oneshot, p._create_time = pid, None, None, ctime
                p._ident, p._exitcode = (pid, start), _UNSET
                cache[pid] = p
            p._name, p._ppid = name, ppid
            if rows is not None:
                p.info = rows[i]
            append(p)
    finally:
        if paused:
            gc.enable()
    for p in procs:
        if each:
            try:
                p.info = p.as_dict(attrs=attrs, ad_value=ad_value)
            except _Caught.gone:
                _cache.pop(p.pid, None)
                continue
        elif computed:
            info = p.info
            try:
                for a in computed:
                    try:
                        info[a] = getattr(p, a)()
                    except (AccessDenied, ZombieProcess):
                        info[a] = ad_value
            except NoSuchProcess:
                continue
        yield p


process_iter.cache_clear = _cache.clear


def _own_fd_count():
    """The caller's open descriptors as its program has them: taskdiag's kept backend closed
    first (its BPF programs and maps, a daemon connection), then counted as psutil counts."""
    _taskdiag.release()
    return len(os.listdir(f"/proc/{os.getpid()}/fd"))


def _fix_own_num_fds(pids, rows):
    """The caller's own num_fds as its program has them (Process._own_num_fds)."""
    me = os.getpid()
    i = bisect.bisect_left(pids, me)
    if i < len(pids) and pids[i] == me:
        try:
            rows[i]["num_fds"] = _own_fd_count()
        except OSError:
            pass


def _fix_exe(t, rows, ad_value):
    """exe() as psutil answers it where the link is refused or empty (see _exe_answer)."""
    exes = t.column("exe")
    cmdlines = statuses = refused = None
    for i, exe in enumerate(exes):
        if exe:
            continue
        if cmdlines is None:
            cmdlines, statuses = t.column("cmdline"), t.column("status")
            refused = t.column("refused_groups")
        cmdline = cmdlines[i]
        answer = _exe_answer(
            _NULL if exe is None else exe,
            _NULL if cmdline is None else cmdline,
            _refusal_class(statuses[i], refused[i], "exe"),
            _refusal_class(statuses[i], refused[i], "cmdline"),
        )
        rows[i]["exe"] = ad_value if isinstance(answer, type) else answer


def pids():
    """Every process id, sorted."""
    return _taskdiag.snapshot(["pid"], False, None, BACKEND).column("pid")


def pid_exists(pid):
    """Whether a process ``pid`` exists."""
    if pid < 0:
        return False
    if pid == 0:
        return 0 in pids()
    return len(_taskdiag.snapshot(["pid"], False, [pid], BACKEND)) > 0


def wait_procs(procs, timeout=None, callback=None):
    """Waits for the Process objects ``procs`` to end, at most ``timeout`` seconds: (gone,
    alive) lists; each gone one has a ``returncode`` (as psutil's). A negative ``timeout`` is
    a ValueError, a ``callback`` that cannot be called a TypeError, as psutil's."""
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be a positive integer, got {timeout}")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback {callback!r} is not a callable")
    gone, alive = [], list(procs)
    deadline = None if timeout is None else time.monotonic() + timeout
    while alive:
        for p in list(alive):
            try:
                p.returncode = p.wait(0)
            except TimeoutExpired:
                continue
            alive.remove(p)
            gone.append(p)
            if callback is not None:
                callback(p)
        if not alive or (deadline is not None and time.monotonic() >= deadline):
            break
        time.sleep(0.01)
    return gone, alive
