#!/usr/bin/env python3
"""Self-check of powercut_fs.py: mounts it on a temp dir, checks the model (what a cut keeps and
loses), the POSIX operations sled and herald use, and the speed of writes and fsyncs; unmounts.

Usage: python3 tests/tools/powercut/selftest.py     (needs fuse3 and mfusepy, as root)
"""

import errno
import fcntl
import os
import random
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PAGE = 4096


def mounted(mnt):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == mnt for line in f)


class Mount:
    def __init__(self, *extra_args):
        self.tmp = tempfile.mkdtemp(prefix="powercut-selftest-")
        self.mnt = os.path.join(self.tmp, "mnt")
        os.mkdir(self.mnt)
        self.log = open(os.path.join(self.tmp, "fs.log"), "w+")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "powercut_fs.py"), self.mnt, "--die-with-parent",
             *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not mounted(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                raise SystemExit(f"powercut_fs did not mount: {self.log.read()}")
            time.sleep(0.02)  # polling for the mount, with a deadline

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def control(self, cmd):
        with open(self.path(".powercut"), "w") as f:
            f.write(cmd)

    def counters(self):
        with open(self.path(".powercut")) as f:
            fields = [line.split() for line in f]
        return {f[0]: int(f[1]) for f in fields if len(f) == 2}

    def pending_files(self):
        with open(self.path(".powercut")) as f:
            return [line.split()[1] for line in f if line.startswith("pending_file ")]

    def close(self):
        if subprocess.run(["fusermount3", "-u", self.mnt], check=False).returncode != 0:
            # Still busy (a failed check left a descriptor open): detach lazily.
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], check=False)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        os.rmdir(self.mnt)


def pwrite(path, data, offset, sync=None, mode=0o644, flags=0):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, mode)
    try:
        os.pwrite(fd, data, offset)
        if sync == "fsync":
            os.fsync(fd)
        elif sync == "fdatasync":
            os.fdatasync(fd)
    finally:
        os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def page(tag, n=PAGE):
    return (tag * n)[:n]


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


@test
def unsynced_writes_are_lost_and_synced_ones_kept(m):
    p = m.path("a")
    pwrite(p, b"A" * 10000, 0, sync="fsync")
    pwrite(p, b"B" * 100, 5000)  # overwrite inside, not synced
    pwrite(p, b"C" * 3000, 10000)  # growth, not synced
    assert read(p) == b"A" * 5000 + b"B" * 100 + b"A" * 4900 + b"C" * 3000, "reads see pending"
    assert m.counters()["pending_pages"] > 0
    assert m.pending_files() == ["/a"], m.pending_files()
    m.control("cut")
    assert read(p) == b"A" * 10000, "a cut keeps exactly the fsynced content"
    assert os.stat(p).st_size == 10000
    assert m.counters()["pending_pages"] == 0


@test
def a_writer_that_never_fsyncs_loses_everything(m):
    p = m.path("nosync")
    with open(p, "wb") as f:
        f.write(os.urandom(50_000))
        f.flush()
    assert os.stat(p).st_size == 50_000
    m.control("cut")
    assert os.path.exists(p), "the create is metadata: durable at once"
    assert os.stat(p).st_size == 0, "a file never fsynced has durable size 0"
    assert read(p) == b""


@test
def fdatasync_through_a_read_only_descriptor_makes_the_file_durable(m):
    # herald's pattern: sled writes through its fd, herald fdatasyncs its own O_RDONLY fd.
    p = m.path("db")
    wfd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    os.pwrite(wfd, b"x" * 70_000, 0)
    rfd = os.open(p, os.O_RDONLY)
    os.fdatasync(rfd)
    os.pwrite(wfd, b"y" * 10, 0)
    m.control("cut")
    assert os.pread(rfd, 70_010, 0) == b"x" * 70_000
    os.close(rfd)
    os.close(wfd)


@test
def sparse_writes_read_zeros_in_the_gap(m):
    p = m.path("sparse")
    pwrite(p, b"end", 1 << 20, sync="fdatasync")
    assert os.stat(p).st_size == (1 << 20) + 3
    data = read(p)
    assert data[: 1 << 20] == bytes(1 << 20) and data[1 << 20:] == b"end"
    m.control("cut")
    assert read(p) == data


@test
def truncation_is_pending_until_fsync(m):
    p = m.path("trunc")
    pwrite(p, page(b"1") + page(b"2") + page(b"3"), 0, sync="fsync")
    fd = os.open(p, os.O_RDWR)
    os.ftruncate(fd, PAGE + 100)
    os.pwrite(fd, b"Z", 3 * PAGE)  # regrow: the gap must read zeros, not the old bytes
    want = page(b"1") + b"2" * 100 + bytes(2 * PAGE - 100) + b"Z"
    assert os.pread(fd, 5 * PAGE, 0) == want
    m.control("cut")
    assert os.pread(fd, 5 * PAGE, 0) == page(b"1") + page(b"2") + page(b"3"), "truncate undone"
    os.ftruncate(fd, PAGE + 100)
    os.pwrite(fd, b"Z", 3 * PAGE)
    os.fsync(fd)
    m.control("cut")
    assert os.pread(fd, 5 * PAGE, 0) == want, "fsynced truncate kept"
    os.close(fd)


@test
def rename_over_an_existing_file_is_durable_at_once(m):
    old, new = m.path("snap.tmp"), m.path("snap")
    pwrite(new, b"old", 0, sync="fsync")
    pwrite(old, b"new-content", 0, sync="fsync")
    os.rename(old, new)
    assert read(new) == b"new-content" and not os.path.exists(old)
    m.control("cut")
    assert read(new) == b"new-content" and not os.path.exists(old)
    # A rename of a file whose data was never synced: the name survives, the data does not.
    pwrite(old, b"unsynced", 0)
    os.rename(old, new)
    m.control("cut")
    assert os.path.exists(new) and read(new) == b""


@test
def unlink_of_an_open_file_keeps_it_readable_through_the_descriptor(m):
    p = m.path("gone")
    pwrite(p, b"still here", 0, sync="fsync")
    fd = os.open(p, os.O_RDWR)
    os.unlink(p)
    assert not os.path.exists(p)
    assert os.pread(fd, 100, 0) == b"still here"
    os.pwrite(fd, b"S", 0)
    os.fsync(fd)
    assert os.pread(fd, 100, 0) == b"Still here"
    # (fstat of an unlinked file fails with ESTALE here: see README.md, "Limits".)
    os.close(fd)


@test
def cut_random_keeps_the_latest_content_of_kept_pages(m):
    p = m.path("random")
    n = 256
    pwrite(p, b"".join(page(b"D") for _ in range(n)), 0, sync="fsync")
    fd = os.open(p, os.O_RDWR)
    for version in (b"1", b"2", b"3"):  # the kept content must be the last one, never 1 or 2
        for i in range(n):
            os.pwrite(fd, page(version), i * PAGE)
    os.pwrite(fd, page(b"G"), n * PAGE)  # one page of growth
    before = m.counters()
    m.control("cut-random 42")
    after = m.counters()
    data = os.pread(fd, (n + 2) * PAGE, 0)
    pages = [data[i * PAGE:(i + 1) * PAGE] for i in range(len(data) // PAGE)]
    kinds = {pg[:1] for pg in pages[:n]}
    assert kinds <= {b"D", b"3"}, f"pages with content other than durable or latest: {kinds}"
    assert all(len(set(pg)) == 1 for pg in pages[:n]), "a torn page"
    kept = sum(pg[:1] == b"3" for pg in pages[:n])
    assert 0 < kept < n, f"{kept} of {n} pages kept"
    assert after["cut_pages_kept"] - before["cut_pages_kept"] == kept + (len(pages) > n)
    assert len(data) in (n * PAGE, (n + 1) * PAGE)
    # The same seed on the same pending state keeps the same pages.
    os.close(fd)
    return kept


@test
def cut_random_is_deterministic_for_a_seed(m):
    def run():
        p = m.path("det")
        pwrite(p, bytes(64 * PAGE), 0, sync="fsync", flags=os.O_TRUNC)
        pwrite(p, b"x" * (64 * PAGE), 0)
        m.control("cut-random 7")
        return read(p)
    assert run() == run()


@test
def modes_owners_and_times_are_kept(m):
    old = os.umask(0o077)
    try:
        d = m.path("private")
        os.mkdir(d)
        f = os.path.join(d, "db")
        pwrite(f, b"", 0, mode=0o666)
    finally:
        os.umask(old)
    assert os.stat(d).st_mode & 0o777 == 0o700, oct(os.stat(d).st_mode)
    assert os.stat(f).st_mode & 0o777 == 0o600, oct(os.stat(f).st_mode)
    os.chmod(f, 0o640)
    os.chown(f, 1234, 5678)
    os.utime(f, ns=(1_000_000_000_123, 2_000_000_000_456))
    m.control("cut")
    st = os.stat(f)
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o640, 1234, 5678)
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_000_000_000_123, 2_000_000_000_456)
    fd = os.open(f, os.O_RDONLY)
    os.fchmod(fd, 0o600)
    os.close(fd)
    assert os.stat(f).st_mode & 0o777 == 0o600


@test
def directories_list_rename_and_remove(m):
    d = m.path("dir")
    os.mkdir(d)
    os.mkdir(os.path.join(d, "sub"))
    pwrite(os.path.join(d, "f"), b"1", 0)
    assert sorted(os.listdir(d)) == ["f", "sub"]
    assert ".powercut" not in os.listdir(m.mnt), "the control file is hidden from readdir"
    try:
        os.rmdir(d)
        raise AssertionError("rmdir of a non-empty dir succeeded")
    except OSError as e:
        assert e.errno == errno.ENOTEMPTY
    os.rename(d, m.path("dir2"))
    assert sorted(os.listdir(m.path("dir2"))) == ["f", "sub"]
    fd = os.open(m.path("dir2"), os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)
    os.rmdir(m.path("dir2", "sub"))
    os.unlink(m.path("dir2", "f"))
    os.rmdir(m.path("dir2"))
    assert not os.path.exists(m.path("dir2"))


@test
def flock_statfs_fallocate(m):
    p = m.path("locked")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fd2 = os.open(p, os.O_RDWR)
    try:
        fcntl.flock(fd2, fcntl.LOCK_EX | fcntl.LOCK_NB)
        raise AssertionError("a second exclusive flock succeeded")
    except BlockingIOError:
        pass
    os.close(fd2)
    st = os.statvfs(m.mnt)
    assert st.f_bsize == PAGE and st.f_bavail > 0
    before = m.counters()["fallocates"]
    os.posix_fallocate(fd, 0, 3 * PAGE)
    assert os.fstat(fd).st_size == 3 * PAGE
    assert m.counters()["fallocates"] == before + 1, "fallocate did not reach the filesystem"
    m.control("cut")
    assert os.fstat(fd).st_size == 0, "an unsynced fallocate growth is pending state"
    os.close(fd)


@test
def bad_control_commands_are_refused(m):
    for cmd in ("explode", "cut-random x", "cut now"):
        try:
            m.control(cmd)
            raise AssertionError(f"{cmd!r} was accepted")
        except OSError as e:
            assert e.errno == errno.EINVAL, e


@test
def an_armed_cut_happens_right_after_the_nth_write_and_the_disk_stays_dead(m):
    p = m.path("armed")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    os.pwrite(fd, b"synced", 0)
    os.fsync(fd)
    cuts = m.counters()["cuts"]
    m.control("cut-after-writes 3")
    os.pwrite(fd, b"1", 10)
    os.pwrite(fd, b"2", 11)
    assert m.counters()["cuts"] == cuts and m.counters()["armed"] == 1
    os.pwrite(fd, b"3", 12)  # the third write: accepted, then the power goes out
    assert m.counters()["cuts"] == cuts + 1 and m.counters()["dead"] == 1
    for op in (lambda: os.pwrite(fd, b"4", 13), lambda: os.fsync(fd),
               lambda: os.pread(fd, 10, 0), lambda: os.mkdir(m.path("x"))):
        try:
            op()
            raise AssertionError("an operation succeeded on a dead disk")
        except OSError as e:
            assert e.errno == errno.EIO, e
    m.control("revive")
    assert os.pread(fd, 100, 0) == b"synced", "the armed cut dropped the unsynced writes"
    os.close(fd)


@test
def writes_and_fsyncs_are_fast_enough(m):
    # herald's commit path: appends of a few KiB, an fdatasync per commit cycle, on a file that
    # keeps growing. Costs must not grow with the file size.
    p = m.path("speed")
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    chunk = os.urandom(8192)
    t0 = time.monotonic()
    off = 0
    syncs = 0
    while off < 32 << 20:
        os.pwrite(fd, chunk, off)
        off += len(chunk)
        if off % (32 << 10) == 0:
            os.fdatasync(fd)
            syncs += 1
    dt = time.monotonic() - t0
    # Big writes, as sled's segment flushes do.
    big = os.urandom(512 << 10)
    t1 = time.monotonic()
    for i in range(64):
        os.pwrite(fd, big, off + i * len(big))
        os.fdatasync(fd)
    dt_big = time.monotonic() - t1
    os.close(fd)
    mbps = 32 / dt
    rate = syncs / dt
    print(f"    {mbps:.1f} MB/s in 8 KiB writes with {rate:.0f} fdatasyncs/s; "
          f"{32 / dt_big:.1f} MB/s in 512 KiB writes each fdatasynced")
    assert mbps > 5 and rate > 200, "too slow for herald's commit path"
    m.control("cut")


def main():
    if os.geteuid() != 0:
        print("note: not root; mounting may fail", file=sys.stderr)
    m = Mount()
    passed = failed = 0
    try:
        for t in TESTS:
            try:
                t(m)
                print(f"ok   {t.__name__}")
                passed += 1
            except Exception:
                print(f"FAIL {t.__name__}")
                traceback.print_exc()
                failed += 1
    finally:
        m.close()
        print(open(m.log.name).read(), end="", file=sys.stderr)
    # The fault mode that lets a test prove it can fail: fdatasync that makes nothing durable.
    m = Mount("--ignore-fdatasync")
    try:
        p = m.path("lying")
        pwrite(p, b"fsynced", 0, sync="fsync")
        pwrite(p, b"FDATASYNCED", 0, sync="fdatasync")
        m.control("cut")
        assert read(p) == b"fsynced", read(p)
        print("ok   ignore_fdatasync_makes_fdatasync_a_lie")
        passed += 1
    except Exception:
        print("FAIL ignore_fdatasync_makes_fdatasync_a_lie")
        traceback.print_exc()
        failed += 1
    finally:
        m.close()
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    random.seed(0)
    main()
