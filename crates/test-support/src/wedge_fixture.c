/*
 * wedge_fixture: a process whose memory-map lock stays wedged until this program is told to
 * stop, for testing that taskdiag does not hang on such a process (see wedge.rs).
 *
 *   WEDGE_MARKER=TOKEN wedge_fixture MOUNTDIR
 *
 * Without libfuse: it opens /dev/fuse, mounts a FUSE file system on MOUNTDIR (mount(2),
 * "fd=N,rootmode=40000,user_id=U,group_id=G") and serves it itself, single-threaded. The file
 * system holds one regular file, "file", of one page. The server forks (while single-threaded)
 * the target, which executes this program again as
 *
 *   wedge-target --marker TOKEN
 *
 * (comm "wedge-target"; the file's path in WEDGE_FILE). The target maps the file, starts a
 * thread ("wedge-writer") that maps and unmaps an anonymous page in a loop, and reads the
 * mapping in its main thread. The server answers the file's first two READ requests with EIO
 * and never answers the next: the page fault's first attempt (under the VMA lock, or with the
 * mmap lock dropped for the I/O) fails and is retried with FAULT_FLAG_TRIED under
 * mmap_read_lock, which may not be dropped, and filemap_fault reads the folio again with the
 * lock held (filemap_read_folio > fuse_read_folio > request_wait_answer). The writer's
 * mmap() then waits for the write lock, and, a writer being queued, every later reader of the
 * target's mm (/proc/PID/cmdline, environ, smaps_rollup, mem, bpf_copy_from_user_task; maps
 * where the kernel reads them under the mmap lock: 6.18 reads them under per-VMA locks and
 * answers) sleeps, killably, until the server lets go.
 *
 * Were a held READ not the one under the lock (another kernel's fault path making a different
 * number of attempts), the writer would keep running: the server then answers it with EIO too
 * and holds the next one.
 *
 * Once wedged, verified (a READ held; the writer thread asleep (D) in the kernel; a probe child
 * reading /proc/TARGET/cmdline asleep (D) and without an answer after 200 ms) it prints
 *
 *   ready server=PID target=PID writer=TID
 *
 * on stdout and keeps serving (other requests are answered: only the held READ is not) until
 * SIGTERM (or SIGINT, SIGHUP). Then it aborts the connection (closes /dev/fuse, its only
 * descriptor, and writes 1 to /sys/fs/fuse/connections/N/abort where fusectl is mounted): the
 * held request fails, the target's fault with it, and the lock is released. It kills the
 * target, reaps it, unmounts MOUNTDIR (MNT_DETACH) and exits 0. Killed with SIGKILL, the
 * kernel closes /dev/fuse for it, which releases the lock the same way; the target, whose
 * parent-death signal is SIGKILL, then dies too (the mount stays, for the caller to detach).
 *
 * Exit status: 0 after a stop, 3 when FUSE is unavailable (no /dev/fuse, or the mount is
 * refused), 1 on any other failure, each explained on stderr. WEDGE_DEBUG=1 logs every request
 * on stderr.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_UNAVAILABLE 3
#define FILE_INO 2
#define FILE_NAME "file"
#define TTL 86400
/* How many READs are answered with EIO before one is held (this kernel's fault path); for
 * testing the fallback, WEDGE_EIO_FIRST overrides it. */
#define EIO_FIRST 2
static int eio_first = EIO_FIRST;
/* The most READs answered with EIO (another kernel's path) before giving up. */
#define EIO_MAX 8
/* How much CPU time (clock ticks) the writer may use while a READ is held before the held
 * READ is known not to be under the lock. */
#define WRITER_RUNS_TICKS 5
#define PROBE_MS 200
#define READY_LIMIT_MS 20000
#define REAP_LIMIT_MS 20000
#define BUF_SIZE (256 * 1024)
#define MAX_WRITE (128 * 1024)

static int debug;
static const char *prog = "wedge_fixture";

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s[%d]: ", prog, (int)getpid());
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static long long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&t, &t) < 0 && errno == EINTR)
		;
}

/* ---------------------------------------------------------------- the target */

static void *writer(void *arg)
{
	(void)arg;
	long page = sysconf(_SC_PAGESIZE);
	pthread_setname_np(pthread_self(), "wedge-writer");
	for (;;) {
		void *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != MAP_FAILED)
			munmap(p, page);
	}
	return NULL;
}

static int target_main(void)
{
	prog = "wedge-target";
	prctl(PR_SET_NAME, "wedge-target");
	const char *path = getenv("WEDGE_FILE");
	if (!path) {
		logf_("WEDGE_FILE is not set");
		return 1;
	}
	long page = sysconf(_SC_PAGESIZE);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		logf_("opening %s: %s", path, strerror(errno));
		return 1;
	}
	volatile unsigned char *p = mmap(NULL, page, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		logf_("mmap %s: %s", path, strerror(errno));
		return 1;
	}
	pthread_t t;
	int e = pthread_create(&t, NULL, writer, NULL);
	if (e) {
		logf_("pthread_create: %s", strerror(e));
		return 1;
	}
	/* The fault: it never returns while the server holds the READ; its failure is SIGBUS. */
	unsigned char c = p[0];
	logf_("reading %s returned (%u): the lock was not wedged", path, c);
	return 1;
}

/* ---------------------------------------------------------------- the server */

static int fuse_fd = -1;
static pid_t target = -1, probe = -1;
static int reads, eios, held_read;
static uint64_t held_unique;
static long page_size;

static void reply(uint64_t unique, int error, const void *data, size_t size)
{
	struct fuse_out_header h = {
		.len = sizeof h + (error ? 0 : size), .error = error, .unique = unique
	};
	struct iovec iov[2] = { { &h, sizeof h }, { (void *)data, error ? 0 : size } };
	if (writev(fuse_fd, iov, data && size && !error ? 2 : 1) < 0 && debug)
		logf_("reply to %llu: %s", (unsigned long long)unique, strerror(errno));
}

static void fill_attr(uint64_t ino, struct fuse_attr *a)
{
	memset(a, 0, sizeof *a);
	a->ino = ino;
	a->uid = getuid();
	a->gid = getgid();
	a->blksize = page_size;
	a->atime = a->mtime = a->ctime = time(NULL);
	if (ino == FUSE_ROOT_ID) {
		a->mode = S_IFDIR | 0755;
		a->nlink = 2;
	} else {
		a->mode = S_IFREG | 0444;
		a->nlink = 1;
		a->size = page_size;
		a->blocks = page_size / 512;
	}
}

static const char *opname(uint32_t op)
{
	switch (op) {
	case FUSE_INIT: return "INIT";
	case FUSE_LOOKUP: return "LOOKUP";
	case FUSE_GETATTR: return "GETATTR";
	case FUSE_OPEN: return "OPEN";
	case FUSE_READ: return "READ";
	case FUSE_FLUSH: return "FLUSH";
	case FUSE_RELEASE: return "RELEASE";
	case FUSE_OPENDIR: return "OPENDIR";
	case FUSE_READDIR: return "READDIR";
	case FUSE_RELEASEDIR: return "RELEASEDIR";
	case FUSE_FORGET: return "FORGET";
	case FUSE_BATCH_FORGET: return "BATCH_FORGET";
	case FUSE_INTERRUPT: return "INTERRUPT";
	case FUSE_STATFS: return "STATFS";
	case FUSE_ACCESS: return "ACCESS";
	case FUSE_DESTROY: return "DESTROY";
	default: return "?";
	}
}

static void do_readdir(const struct fuse_in_header *in, const struct fuse_read_in *r)
{
	static const struct {
		const char *name;
		uint64_t ino;
		uint32_t type;
	} ents[] = { { ".", FUSE_ROOT_ID, DT_DIR }, { "..", FUSE_ROOT_ID, DT_DIR },
		     { FILE_NAME, FILE_INO, DT_REG } };
	char buf[512];
	size_t len = 0, max = r->size < sizeof buf ? r->size : sizeof buf;
	for (uint64_t i = r->offset; i < sizeof ents / sizeof ents[0]; i++) {
		size_t n = strlen(ents[i].name);
		size_t sz = FUSE_DIRENT_ALIGN(FUSE_NAME_OFFSET + n);
		if (len + sz > max)
			break;
		struct fuse_dirent *d = (struct fuse_dirent *)(buf + len);
		memset(d, 0, sz);
		d->ino = ents[i].ino;
		d->off = i + 1;
		d->namelen = n;
		d->type = ents[i].type;
		memcpy(d->name, ents[i].name, n);
		len += sz;
	}
	reply(in->unique, 0, buf, len);
}

/* Serves one request. */
static void serve(const char *buf, size_t n)
{
	const struct fuse_in_header *in = (const void *)buf;
	const void *arg = buf + sizeof *in;
	if (n < sizeof *in)
		return;
	if (debug)
		logf_("request %llu: %s (%u) node %llu from pid %u", (unsigned long long)in->unique,
		      opname(in->opcode), in->opcode, (unsigned long long)in->nodeid, in->pid);
	switch (in->opcode) {
	case FUSE_INIT: {
		const struct fuse_init_in *i = arg;
		struct fuse_init_out o = { 0 };
		if (i->major != FUSE_KERNEL_VERSION) {
			logf_("the kernel speaks FUSE %u, not %u", i->major, FUSE_KERNEL_VERSION);
			reply(in->unique, -EPROTO, NULL, 0);
			return;
		}
		o.major = FUSE_KERNEL_VERSION;
		o.minor = i->minor < FUSE_KERNEL_MINOR_VERSION ? i->minor : FUSE_KERNEL_MINOR_VERSION;
		o.max_readahead = i->max_readahead;
		o.max_background = 16;
		o.congestion_threshold = 12;
		o.max_write = MAX_WRITE;
		o.time_gran = 1;
		reply(in->unique, 0, &o, sizeof o);
		return;
	}
	case FUSE_LOOKUP: {
		const char *name = arg;
		struct fuse_entry_out o = { 0 };
		if (in->nodeid != FUSE_ROOT_ID || strcmp(name, FILE_NAME) != 0) {
			reply(in->unique, -ENOENT, NULL, 0);
			return;
		}
		o.nodeid = FILE_INO;
		o.generation = 1;
		o.entry_valid = o.attr_valid = TTL;
		fill_attr(FILE_INO, &o.attr);
		reply(in->unique, 0, &o, sizeof o);
		return;
	}
	case FUSE_GETATTR: {
		struct fuse_attr_out o = { 0 };
		if (in->nodeid != FUSE_ROOT_ID && in->nodeid != FILE_INO) {
			reply(in->unique, -ENOENT, NULL, 0);
			return;
		}
		o.attr_valid = TTL;
		fill_attr(in->nodeid, &o.attr);
		reply(in->unique, 0, &o, sizeof o);
		return;
	}
	case FUSE_OPEN:
	case FUSE_OPENDIR: {
		struct fuse_open_out o = { 0 };
		uint64_t want = in->opcode == FUSE_OPEN ? FILE_INO : FUSE_ROOT_ID;
		if (in->nodeid != want) {
			reply(in->unique, in->opcode == FUSE_OPEN ? -EISDIR : -ENOTDIR, NULL, 0);
			return;
		}
		o.fh = in->opcode == FUSE_OPEN ? 1 : 2;
		reply(in->unique, 0, &o, sizeof o);
		return;
	}
	case FUSE_READ: {
		const struct fuse_read_in *r = arg;
		reads++;
		if (held_read) {
			/* Another READ while one is held: only the target reads the file (the
			 * mount is its owner's only), and it waits for the held one. */
			logf_("READ %d (offset %llu, %u bytes, pid %u) while one is held: EIO", reads,
			      (unsigned long long)r->offset, r->size, in->pid);
			reply(in->unique, -EIO, NULL, 0);
			return;
		}
		if (eios < eio_first) {
			eios++;
			if (debug)
				logf_("READ %d (offset %llu, %u bytes): EIO", reads,
				      (unsigned long long)r->offset, r->size);
			reply(in->unique, -EIO, NULL, 0);
			return;
		}
		if (debug)
			logf_("READ %d (offset %llu, %u bytes): held", reads,
			      (unsigned long long)r->offset, r->size);
		held_read = 1;
		held_unique = in->unique;
		return;
	}
	case FUSE_READDIR:
		do_readdir(in, arg);
		return;
	case FUSE_STATFS: {
		struct fuse_statfs_out o = { 0 };
		o.st.blocks = 1;
		o.st.files = 2;
		o.st.bsize = o.st.frsize = page_size;
		o.st.namelen = 255;
		reply(in->unique, 0, &o, sizeof o);
		return;
	}
	case FUSE_FLUSH:
	case FUSE_RELEASE:
	case FUSE_RELEASEDIR:
	case FUSE_ACCESS:
	case FUSE_DESTROY:
		reply(in->unique, 0, NULL, 0);
		return;
	case FUSE_FORGET:
	case FUSE_BATCH_FORGET:
	case FUSE_NOTIFY_REPLY:
		return; /* no reply expected */
	case FUSE_INTERRUPT:
		/* A signal for the held READ's thread (a fatal one: it cannot end until the
		 * READ is answered). Not answering leaves the READ held, as wanted. */
		return;
	default:
		reply(in->unique, -ENOSYS, NULL, 0);
		return;
	}
}

/* Reads one file of /proc into buf (NUL-terminated); its length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return n;
}

/* The state letter of task tid of process pid and its CPU time (utime + stime, in ticks);
 * 0 if it is gone. */
static char task_state(pid_t pid, pid_t tid, long long *ticks)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	if (read_small(path, buf, sizeof buf) < 0)
		return 0;
	char *p = strrchr(buf, ')');
	if (!p || !p[1] || !p[2])
		return 0;
	char state = p[2];
	if (ticks) {
		/* After ") ": state is field 3; utime and stime fields 14 and 15. */
		unsigned long long ut = 0, st = 0;
		char *s = p + 2;
		for (int f = 3; f < 14 && s; f++) {
			s = strchr(s, ' ');
			if (s)
				s++;
		}
		if (s && sscanf(s, "%llu %llu", &ut, &st) == 2)
			*ticks = (long long)(ut + st);
	}
	return state;
}

/* The target's writer thread (named wedge-writer); 0 if not (yet) found. */
static pid_t find_writer(void)
{
	char path[64], comm[64];
	snprintf(path, sizeof path, "/proc/%d/task", (int)target);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	pid_t found = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		pid_t tid = atoi(e->d_name);
		if (tid <= 0 || tid == target)
			continue;
		snprintf(path, sizeof path, "/proc/%d/task/%d/comm", (int)target, (int)tid);
		if (read_small(path, comm, sizeof comm) > 0 && strcmp(comm, "wedge-writer\n") == 0) {
			found = tid;
			break;
		}
	}
	closedir(d);
	return found;
}

/* Starts a child that reads /proc/TARGET/cmdline, which sleeps while the lock is wedged. */
static pid_t start_probe(void)
{
	pid_t p = fork();
	if (p < 0) {
		logf_("fork (probe): %s", strerror(errno));
		exit(1);
	}
	if (p == 0) {
		char path[64], buf[4096];
		/* Not to keep the connection alive should the server die first. */
		close(fuse_fd);
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		snprintf(path, sizeof path, "/proc/%d/cmdline", (int)target);
		int fd = open(path, O_RDONLY);
		if (fd >= 0 && read(fd, buf, sizeof buf) >= 0)
			_exit(0);
		_exit(1);
	}
	return p;
}

static void stop_probe(void)
{
	if (probe <= 0)
		return;
	kill(probe, SIGKILL);
	while (waitpid(probe, NULL, 0) < 0 && errno == EINTR)
		;
	probe = -1;
}

static char mountdir[4096];
static char abort_path[128];

/* Releases everything: the connection (and so the held READ and the lock), the target, the
 * mount. Exits with status. */
static void finish(int status)
{
	stop_probe();
	if (abort_path[0]) {
		int fd = open(abort_path, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			if (write(fd, "1", 1) < 0 && debug)
				logf_("writing %s: %s", abort_path, strerror(errno));
			close(fd);
		}
	}
	if (fuse_fd >= 0) {
		close(fuse_fd);
		fuse_fd = -1;
	}
	if (target > 0) {
		kill(target, SIGKILL);
		long long deadline = now_ms() + REAP_LIMIT_MS;
		for (;;) {
			pid_t r = waitpid(target, NULL, WNOHANG);
			if (r == target || (r < 0 && errno != EINTR))
				break;
			if (now_ms() > deadline) {
				logf_("target %d did not exit within %d ms after the connection was "
				      "aborted", (int)target, REAP_LIMIT_MS);
				status = 1;
				break;
			}
			sleep_ms(5);
		}
		target = -1;
	}
	if (mountdir[0] && umount2(mountdir, MNT_DETACH) < 0 && errno != EINVAL &&
	    errno != ENOENT) {
		logf_("umount2 %s: %s", mountdir, strerror(errno));
		status = 1;
	}
	exit(status);
}

/* The fusectl abort file of the connection mounted on mountdir, from /proc/self/mountinfo
 * (not from stat(2) on the mount, which this single-threaded server would have to answer). */
static void find_abort_path(void)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[8192];
	unsigned maj, min;
	char mnt[4096];
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, mnt) == 3 &&
		    strcmp(mnt, mountdir) == 0 && strstr(line, " - fuse.taskdiag-wedge ")) {
			char dir[96];
			snprintf(dir, sizeof dir, "/sys/fs/fuse/connections/%u", min);
			if (access(dir, F_OK) == 0)
				snprintf(abort_path, sizeof abort_path, "%s/abort", dir);
		}
	}
	fclose(f);
}

static void fail(const char *what)
{
	logf_("%s (READs: %d, answered with EIO: %d, one held: %s)", what, reads, eios,
	      held_read ? "yes" : "no");
	finish(1);
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[0], "wedge-target") == 0 && strcmp(argv[1], "--marker") == 0)
		return target_main();
	if (argc != 2) {
		fprintf(stderr, "usage: WEDGE_MARKER=TOKEN %s MOUNTDIR\n", argv[0]);
		return 1;
	}
	debug = getenv("WEDGE_DEBUG") && strcmp(getenv("WEDGE_DEBUG"), "1") == 0;
	page_size = sysconf(_SC_PAGESIZE);
	if (getenv("WEDGE_EIO_FIRST"))
		eio_first = atoi(getenv("WEDGE_EIO_FIRST"));
	const char *marker = getenv("WEDGE_MARKER");
	if (!marker || !*marker) {
		fprintf(stderr, "%s: WEDGE_MARKER is not set\n", argv[0]);
		return 1;
	}
	if (!realpath(argv[1], mountdir)) {
		fprintf(stderr, "%s: %s: %s\n", argv[0], argv[1], strerror(errno));
		return 1;
	}
	char self[4096];
	ssize_t sn = readlink("/proc/self/exe", self, sizeof self - 1);
	if (sn < 0) {
		logf_("readlink /proc/self/exe: %s", strerror(errno));
		return 1;
	}
	self[sn] = 0;
	char file[4200];
	snprintf(file, sizeof file, "%s/%s", mountdir, FILE_NAME);

	sigset_t sigs, old;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGCHLD);
	sigprocmask(SIG_BLOCK, &sigs, &old);
	int sfd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		logf_("signalfd: %s", strerror(errno));
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);

	fuse_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fuse_fd < 0) {
		int e = errno;
		fprintf(stderr, "/dev/fuse: %s: the wedged-lock tests need FUSE (modprobe fuse)\n",
			strerror(e));
		return e == ENOENT || e == ENODEV || e == ENXIO || e == EACCES || e == EPERM
			       ? EXIT_UNAVAILABLE
			       : 1;
	}
	char opts[128];
	snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=%u,group_id=%u", fuse_fd,
		 (unsigned)getuid(), (unsigned)getgid());
	if (mount("taskdiag-wedge", mountdir, "fuse.taskdiag-wedge", MS_NOSUID | MS_NODEV, opts) <
	    0) {
		int e = errno;
		int unavailable = e == EPERM || e == ENODEV || e == EACCES;
		fprintf(stderr, "mounting FUSE on %s: %s%s\n", mountdir, strerror(e),
			unavailable ? ": the wedged-lock tests need FUSE" : "");
		return unavailable ? EXIT_UNAVAILABLE : 1;
	}
	find_abort_path();

	/* The target, forked while this process has one thread. */
	target = fork();
	if (target < 0) {
		logf_("fork: %s", strerror(errno));
		finish(1);
	}
	if (target == 0) {
		pid_t parent = getppid();
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(1);
		close(fuse_fd);
		close(sfd);
		int null = open("/dev/null", O_RDWR);
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			if (null > 2)
				close(null);
		}
		signal(SIGPIPE, SIG_DFL);
		sigprocmask(SIG_SETMASK, &old, NULL);
		setenv("WEDGE_FILE", file, 1);
		unsetenv("WEDGE_MARKER");
		char *const args[] = { "wedge-target", "--marker", (char *)marker, NULL };
		execv(self, args);
		fprintf(stderr, "wedge-target: executing %s: %s\n", self, strerror(errno));
		_exit(1);
	}

	static char buf[BUF_SIZE];
	long long start = now_ms(), probe_at = 0, held_at = 0, held_ticks = -1;
	pid_t writer_tid = 0;
	int ready = 0;
	for (;;) {
		struct pollfd fds[2] = { { fuse_fd, POLLIN, 0 }, { sfd, POLLIN, 0 } };
		int r = poll(fds, 2, ready ? -1 : 10);
		if (r < 0 && errno != EINTR) {
			logf_("poll: %s", strerror(errno));
			finish(1);
		}
		if (r > 0 && (fds[1].revents & POLLIN)) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) == sizeof si) {
				if (si.ssi_signo != SIGCHLD) {
					if (debug)
						logf_("signal %u: stopping", si.ssi_signo);
					finish(0);
				}
			}
			int st;
			pid_t c;
			while ((c = waitpid(-1, &st, WNOHANG)) > 0) {
				if (c == probe) {
					probe = -1;
					probe_at = 0;
					if (debug)
						logf_("the probe read /proc/%d/cmdline: not wedged yet",
						      (int)target);
				} else if (c == target) {
					target = -1;
					char what[128];
					if (WIFSIGNALED(st))
						snprintf(what, sizeof what, "the target died of signal %d",
							 WTERMSIG(st));
					else
						snprintf(what, sizeof what, "the target exited (%d)",
							 WEXITSTATUS(st));
					fail(what);
				}
			}
		}
		if (r > 0 && (fds[0].revents & (POLLIN | POLLERR | POLLHUP))) {
			ssize_t n = read(fuse_fd, buf, sizeof buf);
			if (n < 0 && errno == ENODEV)
				fail("the FUSE connection ended (unmounted or aborted by someone else)");
			if (n < 0 && errno != EINTR && errno != ENOENT && errno != EAGAIN) {
				logf_("reading /dev/fuse: %s", strerror(errno));
				finish(1);
			}
			if (n > 0) {
				int was_held = held_read;
				serve(buf, n);
				if (held_read && !was_held) {
					held_at = now_ms();
					held_ticks = -1;
				}
			}
		}
		if (ready)
			continue;
		/* Not wedged yet: check. */
		if (now_ms() - start > READY_LIMIT_MS)
			fail("the lock was not wedged in time");
		if (!held_read)
			continue;
		if (!writer_tid)
			writer_tid = find_writer();
		if (!writer_tid)
			continue;
		long long ticks = -1;
		char ws = task_state(target, writer_tid, &ticks);
		if (ws != 'D') {
			if (held_ticks < 0)
				held_ticks = ticks;
			else if (ticks - held_ticks >= WRITER_RUNS_TICKS) {
				/* The writer runs while a READ is held: that READ is not under the
				 * lock. Fail it and hold the next. */
				if (eios >= EIO_MAX)
					fail("the writer thread kept running: no READ is under the lock");
				if (debug)
					logf_("the writer runs %lld ms after READ %d was held: EIO",
					      now_ms() - held_at, reads);
				eios++;
				held_read = 0;
				reply(held_unique, -EIO, NULL, 0);
			}
			continue;
		}
		if (probe <= 0) {
			probe = start_probe();
			probe_at = now_ms();
			continue;
		}
		if (now_ms() - probe_at < PROBE_MS || task_state(probe, probe, NULL) != 'D')
			continue;
		stop_probe();
		ready = 1;
		printf("ready server=%d target=%d writer=%d\n", (int)getpid(), (int)target,
		       (int)writer_tid);
		if (fflush(stdout) != 0)
			fail("writing the readiness line");
		if (debug)
			logf_("wedged after %lld ms", now_ms() - start);
	}
}
