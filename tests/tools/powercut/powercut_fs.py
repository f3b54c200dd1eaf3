#!/usr/bin/env python3
"""powercut_fs: an in-memory FUSE filesystem that can simulate a power cut.

Every file has a *durable* image (what a disk would hold after a power cut) and *pending* state
(what a page cache would hold: dirty 4 KiB pages with their latest content, the logical size, and a
pending truncation). Readers see pending over durable. fsync/fdatasync of a file makes its pending
state durable. Metadata operations (create, mkdir, rename, unlink, rmdir, chmod, chown, utimens) are
durable at once, as on a journaling filesystem; a file that was created and never fsynced has
durable size 0.

A test commands the cut through the control file `/.powercut` at the mount root (hidden from
readdir; write one command per write):

    cut              every file loses its pending state (back to its durable image)
    cut-random SEED  each dirty page is kept (with its latest content) with probability 1/2, drawn
                     from random.Random(SEED); see README.md for sizes and truncations
    cut-after-writes N [SEED]
                     arms a cut (cut-random SEED if given) that happens right after the Nth next
                     write to a file; from then on the disk is dead: every operation but on the
                     control file fails with EIO, until `revive`
    revive           disarms, and ends the dead state of an armed cut
    sync             makes everything durable (like sync(1))

Reading `/.powercut` returns counters, one `name value` per line, then one
`pending_file PATH pages=N size=N durable_size=N` line per file with pending state.

Usage: python3 powercut_fs.py MOUNTPOINT [--die-with-parent] [--ignore-fdatasync] [--debug]
Runs in the foreground until unmounted (`fusermount3 -u MOUNTPOINT`) or sent SIGTERM/SIGINT.
"""

import argparse
import ctypes
import ctypes.util
import errno
import os
import random
import signal
import stat
import sys
import time

try:
    import mfusepy as fuse
except ImportError as e:  # pragma: no cover - depends on the machine
    sys.exit(f"powercut_fs: cannot import mfusepy ({e}); install it with: pip install mfusepy "
             "(and Debian's fuse3 package for libfuse3 and fusermount3)")

PAGE = 4096
CONTROL = ".powercut"
CONTROL_INO = 2
ROOT_INO = 1


def now_ns():
    return time.time_ns()


def oserror(code):
    return fuse.FuseOSError(code)


class Node:
    __slots__ = ("ino", "mode", "uid", "gid", "atime", "mtime", "ctime", "nlink", "opens")

    def __init__(self, ino, mode, uid, gid):
        t = now_ns()
        self.ino = ino
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.atime = self.mtime = self.ctime = t
        self.nlink = 1
        self.opens = 0

    def attrs(self):
        return {
            "st_ino": self.ino,
            "st_mode": self.mode,
            "st_nlink": self.nlink,
            "st_uid": self.uid,
            "st_gid": self.gid,
            "st_atime": self.atime,
            "st_mtime": self.mtime,
            "st_ctime": self.ctime,
            "st_blksize": PAGE,
        }


class Dir(Node):
    __slots__ = ("entries", "parent")

    def __init__(self, ino, mode, uid, gid, parent):
        super().__init__(ino, stat.S_IFDIR | (mode & 0o7777), uid, gid)
        self.entries = {}  # name -> Node
        self.parent = parent
        self.nlink = 2

    def attrs(self):
        a = super().attrs()
        a["st_size"] = PAGE
        a["st_blocks"] = PAGE // 512
        return a


class File(Node):
    """A regular file: durable image plus pending state.

    Invariants: bytes beyond `dsize` in durable pages are zero; bytes beyond `size` in dirty pages
    are zero; floor <= size, floor <= dsize. Durable pages are never mutated in place (a page that
    becomes dirty is copied first), so fsync only moves references: O(dirty pages).
    """

    __slots__ = ("durable", "dsize", "dirty", "size", "floor")

    def __init__(self, ino, mode, uid, gid):
        super().__init__(ino, stat.S_IFREG | (mode & 0o7777), uid, gid)
        self.durable = {}  # page index -> bytes-like, never mutated
        self.dsize = 0
        self.dirty = {}  # page index -> bytearray(PAGE), latest content
        self.size = 0  # logical (visible) size
        self.floor = 0  # durable bytes at or past this offset are hidden (pending truncation)

    def attrs(self):
        a = super().attrs()
        a["st_size"] = self.size
        a["st_blocks"] = (self.size + 511) // 512
        return a

    # -- reading and writing the visible image ---------------------------------------------------

    def _durable_view(self, idx):
        """The durable page `idx` as readers see it (or None for zeros) and the number of its
        leading bytes that are visible (the rest reads as zeros)."""
        start = idx * PAGE
        limit = min(self.floor, self.dsize)
        if start >= limit:
            return None, 0
        page = self.durable.get(idx)
        if page is None:
            return None, 0
        return page, min(PAGE, limit - start)

    def read(self, offset, size):
        end = min(offset + size, self.size)
        if offset >= end:
            return b""
        out = bytearray()
        pos = offset
        while pos < end:
            idx, po = divmod(pos, PAGE)
            n = min(PAGE - po, end - pos)
            page = self.dirty.get(idx)
            if page is not None:
                out += page[po:po + n]
            else:
                dpage, valid = self._durable_view(idx)
                if dpage is None:
                    out += bytes(n)
                else:
                    take = max(0, min(po + n, valid) - po)
                    out += dpage[po:po + take]
                    if take < n:
                        out += bytes(n - take)
            pos += n
        return bytes(out)

    def _dirty_page(self, idx):
        page = self.dirty.get(idx)
        if page is None:
            dpage, valid = self._durable_view(idx)
            page = bytearray(PAGE)
            if dpage is not None and valid:
                page[:valid] = dpage[:valid]
            self.dirty[idx] = page
        return page

    def write(self, data, offset):
        pos = offset
        i = 0
        total = len(data)
        mv = memoryview(data)
        while i < total:
            idx, po = divmod(pos, PAGE)
            n = min(PAGE - po, total - i)
            page = self._dirty_page(idx)
            page[po:po + n] = mv[i:i + n]
            pos += n
            i += n
        if offset + total > self.size:
            self.size = offset + total
        return total

    def truncate(self, length):
        if length < self.size:
            for idx in [i for i in self.dirty if i * PAGE >= length]:
                del self.dirty[idx]
            idx, po = divmod(length, PAGE)
            if po and idx in self.dirty:
                page = self.dirty[idx]
                page[po:] = bytes(PAGE - po)
            self.floor = min(self.floor, length)
        self.size = length

    def zero_range(self, offset, length):
        """Zeroes [offset, offset+length) within the current size (punch hole / zero range)."""
        end = min(offset + length, self.size)
        pos = offset
        while pos < end:
            idx, po = divmod(pos, PAGE)
            n = min(PAGE - po, end - pos)
            page = self._dirty_page(idx)
            page[po:po + n] = bytes(n)
            pos += n

    # -- durability ------------------------------------------------------------------------------

    def _apply_truncation(self):
        """Makes the pending truncation to `floor` durable."""
        if self.floor >= self.dsize:
            return
        first = -(-self.floor // PAGE)  # first page wholly at or past floor
        last = -(-self.dsize // PAGE)
        if last - first < len(self.durable):
            for idx in range(first, last):
                self.durable.pop(idx, None)
        else:
            for idx in [i for i in self.durable if i >= first]:
                del self.durable[idx]
        idx, po = divmod(self.floor, PAGE)
        if po and idx in self.durable:
            page = bytearray(self.durable[idx])
            page[po:] = bytes(PAGE - po)
            self.durable[idx] = bytes(page)
        self.dsize = self.floor

    def pending_pages(self):
        return len(self.dirty)

    def has_pending(self):
        return bool(self.dirty) or self.size != self.dsize or self.floor != self.dsize

    def sync(self):
        """fsync/fdatasync: the pending state becomes durable. O(dirty pages) (plus the pages a
        pending truncation removes)."""
        self._apply_truncation()
        self.durable.update(self.dirty)  # ownership moves; dirty pages are not touched again
        self.dirty = {}
        self.dsize = self.size
        self.floor = self.size

    def cut(self):
        """Power cut: the pending state is lost. Returns (pages kept, pages dropped)."""
        dropped = len(self.dirty)
        self.dirty = {}
        self.size = self.dsize
        self.floor = self.dsize
        return 0, dropped

    def cut_random(self, rng):
        """Power cut where the disk got part of the pending state: each dirty page is kept (with
        its latest content) with probability 1/2; a pending truncation is kept with probability
        1/2; the size becomes the durable size, grown to cover kept pages (never past the size the
        file had). Returns (pages kept, pages dropped)."""
        if self.floor < self.dsize and rng.random() < 0.5:
            self._apply_truncation()
        kept = dropped = 0
        new_size = self.dsize
        for idx in sorted(self.dirty):
            if rng.random() < 0.5:
                self.durable[idx] = self.dirty[idx]
                new_size = max(new_size, min(self.size, (idx + 1) * PAGE))
                kept += 1
            else:
                dropped += 1
        self.dirty = {}
        self.dsize = self.size = self.floor = new_size
        return kept, dropped


class Control(Node):
    """The control file: not a real file; its content is the counters."""

    def __init__(self):
        super().__init__(CONTROL_INO, stat.S_IFREG | 0o600, 0, 0)


class Handle:
    __slots__ = ("node",)

    def __init__(self, node):
        self.node = node


class PowercutFS(fuse.Operations):
    use_ns = True

    def __init__(self, ignore_fdatasync=False):
        self.ignore_fdatasync = ignore_fdatasync
        self.armed = None  # [writes left, seed or None] after `cut-after-writes`
        self.dead = False  # after an armed cut, until `revive`
        self.root = Dir(ROOT_INO, 0o755, os.getuid(), os.getgid(), None)
        self.root.parent = self.root
        self.control = Control()
        self.inodes = {ROOT_INO: self.root}  # every live inode (linked or still open)
        self.next_ino = 3
        self.handles = {}
        self.next_fh = 1
        self.counters = {
            "writes": 0,
            "bytes_written": 0,
            "reads": 0,
            "fsyncs": 0,
            "fdatasyncs": 0,
            "fsyncdirs": 0,
            "truncates": 0,
            "fallocates": 0,
            "renames": 0,
            "unlinks": 0,
            "cuts": 0,
            "cut_pages_kept": 0,
            "cut_pages_dropped": 0,
            "cut_files_changed": 0,
        }

    # -- helpers ---------------------------------------------------------------------------------

    def init_with_config(self, conn, config):
        if config is not None:
            # Nothing cached in the kernel: after a cut, sizes and contents change under it.
            config.entry_timeout = 0.0
            config.attr_timeout = 0.0
            config.negative_timeout = 0.0
            config.direct_io = 1  # every read and write reaches this process (no page cache)
            config.kernel_cache = 0
            config.auto_cache = 0
            config.hard_remove = 1  # unlink really unlinks (no .fuse_hidden files)
            config.use_ino = 1
            config.nullpath_ok = 1  # operations on open files go by handle

    def _ctx_owner(self):
        uid, gid, _pid = fuse.fuse_get_context()
        return uid, gid

    def _lookup(self, path):
        if path is None:
            raise oserror(errno.ENOENT)
        node = self.root
        if path == "/":
            return node
        parts = path.strip("/").split("/")
        if parts == [CONTROL]:
            return self.control
        for name in parts:
            if not isinstance(node, Dir):
                raise oserror(errno.ENOTDIR)
            node = node.entries.get(name)
            if node is None:
                raise oserror(errno.ENOENT)
        return node

    def _parent(self, path):
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._lookup(head or "/")
        if not isinstance(parent, Dir):
            raise oserror(errno.ENOTDIR)
        if not name or name in (".", ".."):
            raise oserror(errno.EINVAL)
        if parent is self.root and name == CONTROL:
            raise oserror(errno.EPERM)
        return parent, name

    def _node(self, path, fh):
        if fh:
            h = self.handles.get(fh)
            if h is None:
                raise oserror(errno.EBADF)
            return h.node
        return self._lookup(path)

    def _file(self, path, fh):
        node = self._node(path, fh)
        if isinstance(node, Dir):
            raise oserror(errno.EISDIR)
        return node

    def _new_handle(self, node):
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = Handle(node)
        node.opens += 1
        return fh

    def _forget_if_dead(self, node):
        if node.nlink == 0 and node.opens == 0 and node.ino in self.inodes:
            del self.inodes[node.ino]

    def _unlink_node(self, node):
        """`node` lost its last name (unlink, or replaced by a rename)."""
        node.nlink = 0
        node.ctime = now_ns()
        self._forget_if_dead(node)

    # -- control ---------------------------------------------------------------------------------

    def _files(self):
        return [n for _, n in sorted(self.inodes.items()) if isinstance(n, File)]

    def status(self):
        files = self._files()
        pending_pages = sum(f.pending_pages() for f in files)
        lines = dict(self.counters)
        lines["files"] = len(files)
        lines["pending_pages"] = pending_pages
        lines["pending_files"] = sum(1 for f in files if f.has_pending())
        lines["durable_bytes"] = sum(f.dsize for f in files)
        lines["ignore_fdatasync"] = int(self.ignore_fdatasync)
        lines["armed"] = 0 if self.armed is None else self.armed[0]
        lines["dead"] = int(self.dead)
        out = "".join(f"{k} {v}\n" for k, v in lines.items())
        # Then one line per file with pending state (more than two fields, so a reader that
        # only wants the counters can skip them).
        paths = self._paths()
        for f in files:
            if f.has_pending():
                out += (f"pending_file {paths.get(f.ino, '(unlinked)')} pages={f.pending_pages()} "
                        f"size={f.size} durable_size={f.dsize}\n")
        return out.encode()

    def _paths(self):
        paths = {}
        stack = [("", self.root)]
        while stack:
            prefix, d = stack.pop()
            for name, child in d.entries.items():
                path = f"{prefix}/{name}"
                paths[child.ino] = path
                if isinstance(child, Dir):
                    stack.append((path, child))
        return paths

    def command(self, text):
        words = text.split()
        if not words:
            return
        if words[0] == "cut" and len(words) == 1:
            self._cut(None)
        elif words[0] == "cut-random" and len(words) == 2:
            try:
                seed = int(words[1])
            except ValueError:
                raise oserror(errno.EINVAL)
            self._cut(random.Random(seed))
        elif words[0] == "cut-after-writes" and len(words) in (2, 3):
            try:
                n = int(words[1])
                seed = int(words[2]) if len(words) == 3 else None
            except ValueError:
                raise oserror(errno.EINVAL)
            if n < 1:
                raise oserror(errno.EINVAL)
            self.armed = [n, seed]
        elif words[0] == "revive" and len(words) == 1:
            self.armed = None
            self.dead = False
        elif words[0] == "sync" and len(words) == 1:
            for f in self._files():
                f.sync()
        else:
            print(f"powercut_fs: unknown command {text!r}", file=sys.stderr, flush=True)
            raise oserror(errno.EINVAL)

    def _check_power(self):
        if self.dead:
            raise oserror(errno.EIO)

    def _cut(self, rng, armed=False):
        kept = dropped = changed = 0
        for f in self._files():
            if not f.has_pending():
                continue
            changed += 1
            k, d = f.cut() if rng is None else f.cut_random(rng)
            kept += k
            dropped += d
        self.counters["cuts"] += 1
        self.counters["cut_pages_kept"] += kept
        self.counters["cut_pages_dropped"] += dropped
        self.counters["cut_files_changed"] += changed
        how = "cut" if rng is None else "cut-random"
        if armed:
            how = f"armed {how} (now dead until `revive`)"
        print(f"powercut_fs: {how}: {changed} file(s) had pending state; "
              f"{kept} dirty page(s) kept, {dropped} dropped", file=sys.stderr, flush=True)

    # -- metadata --------------------------------------------------------------------------------

    def getattr(self, path, fh=None):
        node = self._node(path, fh)
        if node is self.control:
            a = node.attrs()
            a["st_size"] = len(self.status())
            return a
        return node.attrs()

    def access(self, path, amode):
        self._lookup(path)
        return 0

    def statfs(self, path):
        used = sum((f.size + PAGE - 1) // PAGE for f in self._files())
        total = 1 << 24  # 64 GiB in 4 KiB blocks
        free = max(total - used, 0)
        return {
            "f_bsize": PAGE,
            "f_frsize": PAGE,
            "f_blocks": total,
            "f_bfree": free,
            "f_bavail": free,
            "f_files": 1 << 20,
            "f_ffree": (1 << 20) - len(self.inodes),
            "f_favail": (1 << 20) - len(self.inodes),
            "f_namemax": 255,
        }

    def mkdir(self, path, mode):
        self._check_power()
        parent, name = self._parent(path)
        if name in parent.entries:
            raise oserror(errno.EEXIST)
        uid, gid = self._ctx_owner()
        d = Dir(self.next_ino, mode, uid, gid, parent)
        self.next_ino += 1
        self.inodes[d.ino] = d
        parent.entries[name] = d
        parent.nlink += 1
        parent.mtime = parent.ctime = now_ns()
        return 0

    def rmdir(self, path):
        self._check_power()
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise oserror(errno.ENOENT)
        if not isinstance(node, Dir):
            raise oserror(errno.ENOTDIR)
        if node.entries:
            raise oserror(errno.ENOTEMPTY)
        del parent.entries[name]
        parent.nlink -= 1
        parent.mtime = parent.ctime = now_ns()
        self._unlink_node(node)
        return 0

    def unlink(self, path):
        self._check_power()
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise oserror(errno.ENOENT)
        if isinstance(node, Dir):
            raise oserror(errno.EISDIR)
        del parent.entries[name]
        parent.mtime = parent.ctime = now_ns()
        self.counters["unlinks"] += 1
        self._unlink_node(node)
        return 0

    def rename(self, old, new):
        self._check_power()
        oparent, oname = self._parent(old)
        nparent, nname = self._parent(new)
        node = oparent.entries.get(oname)
        if node is None:
            raise oserror(errno.ENOENT)
        if oparent is nparent and oname == nname:
            return 0
        if isinstance(node, Dir):
            # No moving a directory into itself or below it.
            p = nparent
            while True:
                if p is node:
                    raise oserror(errno.EINVAL)
                if p is self.root:
                    break
                p = p.parent
        target = nparent.entries.get(nname)
        if target is not None:
            if isinstance(node, Dir) != isinstance(target, Dir):
                raise oserror(errno.EISDIR if isinstance(target, Dir) else errno.ENOTDIR)
            if isinstance(target, Dir):
                if target.entries:
                    raise oserror(errno.ENOTEMPTY)
                nparent.nlink -= 1
            self._unlink_node(target)
        del oparent.entries[oname]
        nparent.entries[nname] = node
        if isinstance(node, Dir):
            oparent.nlink -= 1
            nparent.nlink += 1
            node.parent = nparent
        t = now_ns()
        oparent.mtime = oparent.ctime = nparent.mtime = nparent.ctime = node.ctime = t
        self.counters["renames"] += 1
        return 0

    def chmod(self, path, mode, fh=None):
        self._check_power()
        node = self._node(path, fh)
        node.mode = (node.mode & ~0o7777) | (mode & 0o7777)
        node.ctime = now_ns()
        return 0

    def chown(self, path, uid, gid, fh=None):
        self._check_power()
        node = self._node(path, fh)
        if uid != -1:
            node.uid = uid
        if gid != -1:
            node.gid = gid
        node.ctime = now_ns()
        return 0

    def utimens(self, path, times=None, fh=None):
        self._check_power()
        node = self._node(path, fh)
        if times is None:
            t = now_ns()
            times = (t, t)
        node.atime, node.mtime = times
        node.ctime = now_ns()
        return 0

    # -- directories -----------------------------------------------------------------------------

    def opendir(self, path):
        self._check_power()
        node = self._lookup(path)
        if not isinstance(node, Dir):
            raise oserror(errno.ENOTDIR)
        return self._new_handle(node)

    def readdir(self, path, fh):
        self._check_power()
        node = self._node(path, fh)
        if not isinstance(node, Dir):
            raise oserror(errno.ENOTDIR)
        out = [(".", {"st_mode": node.mode, "st_ino": node.ino}, 0),
               ("..", {"st_mode": node.parent.mode, "st_ino": node.parent.ino}, 0)]
        for name, child in node.entries.items():
            out.append((name, {"st_mode": child.mode, "st_ino": child.ino}, 0))
        return out

    def releasedir(self, path, fh):
        return self.release(path, fh)

    def fsyncdir(self, path, datasync, fh):
        self._check_power()
        # Metadata is durable at once; nothing to do but count.
        self.counters["fsyncdirs"] += 1
        return 0

    # -- files -----------------------------------------------------------------------------------

    def create(self, path, mode, flags):
        self._check_power()
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is not None:
            if flags & os.O_EXCL:
                raise oserror(errno.EEXIST)
            if isinstance(node, Dir):
                raise oserror(errno.EISDIR)
            if flags & os.O_TRUNC:
                node.truncate(0)
            return self._new_handle(node)
        uid, gid = self._ctx_owner()
        f = File(self.next_ino, mode, uid, gid)
        self.next_ino += 1
        self.inodes[f.ino] = f
        parent.entries[name] = f
        parent.mtime = parent.ctime = now_ns()
        return self._new_handle(f)

    def open(self, path, flags):
        node = self._lookup(path)
        if node is not self.control:
            self._check_power()
        if isinstance(node, Dir):
            raise oserror(errno.EISDIR)
        if flags & os.O_TRUNC and isinstance(node, File):
            node.truncate(0)
            node.mtime = node.ctime = now_ns()
        return self._new_handle(node)

    def read(self, path, size, offset, fh):
        node = self._file(path, fh)
        if node is self.control:
            return self.status()[offset:offset + size]
        self._check_power()
        self.counters["reads"] += 1
        return node.read(offset, size)

    def write(self, path, data, offset, fh):
        node = self._file(path, fh)
        if node is self.control:
            self.command(bytes(data).decode("utf-8", "replace"))
            return len(data)
        self._check_power()
        self.counters["writes"] += 1
        self.counters["bytes_written"] += len(data)
        n = node.write(data, offset)
        node.mtime = node.ctime = now_ns()
        if self.armed is not None:
            self.armed[0] -= 1
            if self.armed[0] <= 0:
                # The power goes out right after this write reached the page cache.
                seed = self.armed[1]
                self.armed = None
                self._cut(None if seed is None else random.Random(seed), armed=True)
                self.dead = True
        return n

    def truncate(self, path, length, fh=None):
        node = self._file(path, fh)
        if node is self.control:
            return 0  # `echo cut > .powercut` opens with O_TRUNC
        self._check_power()
        self.counters["truncates"] += 1
        node.truncate(length)
        node.mtime = node.ctime = now_ns()
        return 0

    def fallocate(self, path, mode, offset, length, fh):
        node = self._file(path, fh)
        if node is self.control:
            raise oserror(errno.EOPNOTSUPP)
        self._check_power()
        self.counters["fallocates"] += 1
        keep_size = 0x01  # FALLOC_FL_KEEP_SIZE
        punch_hole = 0x02  # FALLOC_FL_PUNCH_HOLE
        zero_range = 0x10  # FALLOC_FL_ZERO_RANGE
        if mode & ~(keep_size | punch_hole | zero_range):
            raise oserror(errno.EOPNOTSUPP)
        if mode & punch_hole and not mode & keep_size:
            raise oserror(errno.EINVAL)
        if mode & (punch_hole | zero_range):
            node.zero_range(offset, length)
        if not mode & keep_size and offset + length > node.size:
            # Growing the size is pending state too (durable with the next fsync).
            node.size = offset + length
        node.mtime = node.ctime = now_ns()
        return 0

    def fsync(self, path, datasync, fh):
        node = self._file(path, fh)
        if node is self.control:
            return 0
        self._check_power()
        self.counters["fdatasyncs" if datasync else "fsyncs"] += 1
        if datasync and self.ignore_fdatasync:
            return 0  # the lying disk of --ignore-fdatasync
        node.sync()
        return 0

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        h = self.handles.pop(fh, None)
        if h is not None:
            h.node.opens -= 1
            self._forget_if_dead(h.node)
        return 0


class PowercutFUSE(fuse.FUSE):
    """mfusepy's FUSE, passing the file handle to truncate/chmod/chown/utimens (with nullpath_ok
    an open file's operations come without a path)."""

    @staticmethod
    def _fh(fip):
        return fip.contents.fh if fip else None

    def _path(self, path):
        return None if path is None else path.decode(self.encoding, self.errors)

    def truncate_fuse_3(self, path, length, fip):
        return self.operations.truncate(self._path(path), length, self._fh(fip))

    def chmod_fuse_3(self, path, mode, fip):
        return self.operations.chmod(self._path(path), mode, self._fh(fip))

    def chown_fuse_3(self, path, uid, gid, fip):
        if ctypes.c_uint32(uid + 1).value == 0:
            uid = -1
        if ctypes.c_uint32(gid + 1).value == 0:
            gid = -1
        return self.operations.chown(self._path(path), uid, gid, self._fh(fip))

    def utimens_fuse_3(self, path, buf, fip):
        path = self._path(path)
        fh = self._fh(fip)
        times = None
        if buf:
            # The kernel's UTIME_NOW / UTIME_OMIT reach here as they are.
            utime_now, utime_omit = (1 << 30) - 1, (1 << 30) - 2
            node = self.operations._node(path, fh)
            times = []
            for ts, current in ((buf.contents.actime, node.atime),
                                (buf.contents.modtime, node.mtime)):
                if ts.tv_nsec == utime_now:
                    times.append(now_ns())
                elif ts.tv_nsec == utime_omit:
                    times.append(current)
                else:
                    times.append(ts.tv_sec * 10**9 + ts.tv_nsec)
            times = tuple(times)
        return self.operations.utimens(path, times, fh)


def die_with_parent():
    """Asks the kernel to send SIGTERM when the parent process dies (prctl PR_SET_PDEATHSIG), so a
    test runner that is killed does not leave the filesystem mounted (with auto_unmount)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    if libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0) != 0:
        print("powercut_fs: prctl(PR_SET_PDEATHSIG) failed", file=sys.stderr)
    if os.getppid() == 1:
        sys.exit("powercut_fs: parent already gone")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mountpoint")
    ap.add_argument("--die-with-parent", action="store_true",
                    help="exit (and so unmount) when the parent thread that spawned this "
                         "process exits (PR_SET_PDEATHSIG)")
    ap.add_argument("--debug", action="store_true", help="libfuse debug output")
    ap.add_argument("--ignore-fdatasync", action="store_true",
                    help="fault mode: fdatasync succeeds without making anything durable (fsync "
                         "still does), to check that a test notices acknowledgements that rest "
                         "on it")
    args = ap.parse_args()
    if args.die_with_parent:
        die_with_parent()
    print(f"powercut_fs: mounting on {args.mountpoint}", file=sys.stderr, flush=True)
    PowercutFUSE(
        PowercutFS(ignore_fdatasync=args.ignore_fdatasync),
        args.mountpoint,
        foreground=True,
        nothreads=True,
        debug=args.debug,
        auto_unmount=True,
        fsname="powercut",
        subtype="powercut",
        default_permissions=False,
    )


if __name__ == "__main__":
    main()
