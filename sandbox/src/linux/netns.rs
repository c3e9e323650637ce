//! A network namespace of its own for a tool process whose only way out is the worker's proxy.
//!
//! In the forked child, before the change of user (root worker) or instead of it (a worker
//! that is not root), the hook unshares a network namespace (with the call's PID and mount
//! namespaces, `pidns.rs`, when the host has them), brings its `lo` up, binds
//! `127.0.0.1:`[`PROXY_PORT`] there and passes that listening socket to the parent over a
//! Unix socket pair (`SCM_RIGHTS`); the parent accepts on it from the worker's own network and
//! serves the proxy. The namespace has no other interface and no route: a raw `connect()` to
//! any address but that port fails (`ECONNREFUSED` on loopback, `ENETUNREACH` elsewhere).
//!
//! - Root worker: `unshare(CLONE_NEWNET)`; the process then drops to the sandbox user, so it
//!   has no capability in the namespace (which the initial user namespace owns).
//! - Worker that is not root: `unshare(CLONE_NEWUSER | CLONE_NEWNET)` with the worker's own uid
//!   and gid mapped (`setgroups` denied first, as the kernel requires); the capabilities the
//!   new user namespace grants are lost at `exec`, so the tool cannot reconfigure it either.
//!
//! The listener is kept by the parent for as long as the proxy serves (bound by the worker, it
//! cannot be taken over by the tool: `EADDRINUSE`). Everything here that runs in the child is a
//! raw system call on memory prepared by the parent (see the crate docs).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The port of the proxy inside every tool's network namespace (each namespace is private,
/// so one fixed port serves all and `http_proxy` can be set before the process starts).
pub const PROXY_PORT: u16 = 3128;

/// The parent's half: the socket pair the child sends its listener over.
#[derive(Debug)]
pub(crate) struct NetNs {
    parent: OwnedFd,
    child: Option<OwnedFd>,
}

/// `uid_map` / `gid_map` contents, formatted in the parent: what a process that is not root
/// writes after `unshare(CLONE_NEWUSER)`.
#[derive(Debug, Clone)]
pub(super) struct IdMaps {
    uid: Vec<u8>,
    gid: Vec<u8>,
}

impl IdMaps {
    /// This process's uid and gid mapped to themselves.
    pub(super) fn own() -> Self {
        let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
        Self {
            uid: format!("{uid} {uid} 1\n").into_bytes(),
            gid: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }
}

/// What the child needs, copied into the `pre_exec` closure.
#[derive(Debug, Clone, Copy)]
pub(super) struct NetNsChild {
    sock: RawFd,
}

impl NetNs {
    /// The socket pair (close-on-exec).
    pub(super) fn new() -> io::Result<Self> {
        let (parent, child) = socket_pair()?;
        Ok(Self {
            parent,
            child: Some(child),
        })
    }

    pub(super) fn child(&self) -> Option<NetNsChild> {
        Some(NetNsChild {
            sock: self.child.as_ref()?.as_raw_fd(),
        })
    }

    /// Once the process is spawned (its hook has run): the listener it sent.
    pub(super) fn receive(&mut self) -> io::Result<std::net::TcpListener> {
        self.child = None;
        receive_fd(self.parent.as_raw_fd()).map(std::net::TcpListener::from)
    }
}

impl NetNsChild {
    /// In the child, once in the new network namespace: `lo` up, the listener sent to the
    /// parent.
    pub(super) fn serve(&self) -> io::Result<()> {
        loopback_up()?;
        let listener = listen()?;
        let sent = send_fd(self.sock, listener);
        // SAFETY: closing descriptors this child owns.
        unsafe {
            libc::close(listener);
            libc::close(self.sock);
        }
        sent
    }
}

/// `unshare(flags)`, in a user namespace of its own too with `maps` (a worker that is not
/// root: the new namespaces are then owned by it), whose id maps are written.
pub(super) fn unshare_with(flags: libc::c_int, maps: Option<&IdMaps>) -> io::Result<()> {
    match maps {
        None => check(unsafe_unshare(flags)),
        Some(maps) => {
            check(unsafe_unshare(libc::CLONE_NEWUSER | flags))?;
            // In this order: the kernel refuses a gid_map before setgroups is denied.
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &maps.uid)?;
            write_file(c"/proc/self/gid_map", &maps.gid)
        }
    }
}

/// A new network namespace (and user namespace with `maps`) with `lo` up.
fn enter_namespaces(maps: Option<&IdMaps>) -> io::Result<()> {
    unshare_with(libc::CLONE_NEWNET, maps)?;
    loopback_up()
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn unsafe_unshare(flags: libc::c_int) -> libc::c_int {
    // SAFETY: unshare(2) on the child's only thread.
    unsafe { libc::unshare(flags) }
}

fn write_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: open(2)/write(2)/close(2) with a valid C string and buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        check(fd)?;
        let written = libc::write(fd, data.as_ptr().cast(), data.len());
        let error = io::Error::last_os_error();
        libc::close(fd);
        if written < 0 || written as usize != data.len() {
            return Err(error);
        }
    }
    Ok(())
}

/// `ip link set lo up`, with two ioctls.
fn loopback_up() -> io::Result<()> {
    // SAFETY: socket(2)/ioctl(2)/close(2) with a zeroed `ifreq` naming "lo".
    unsafe {
        let sock = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        check(sock)?;
        let mut request: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as libc::c_char;
        }
        let mut rc = libc::ioctl(sock, libc::SIOCGIFFLAGS, &raw mut request);
        if rc == 0 {
            request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            rc = libc::ioctl(sock, libc::SIOCSIFFLAGS, &raw const request);
        }
        let error = io::Error::last_os_error();
        libc::close(sock);
        if rc < 0 {
            return Err(error);
        }
    }
    Ok(())
}

/// A socket listening on 127.0.0.1:PROXY_PORT in the current namespace.
fn listen() -> io::Result<RawFd> {
    // SAFETY: socket(2)/bind(2)/listen(2) with a valid `sockaddr_in`.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        check(fd)?;
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: PROXY_PORT.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(fd, (&raw const addr).cast(), len) < 0 || libc::listen(fd, 128) < 0 {
            let error = io::Error::last_os_error();
            libc::close(fd);
            return Err(error);
        }
        Ok(fd)
    }
}

fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: socketpair(2) writes two descriptors into the array.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Room for one `cmsghdr` carrying one descriptor (`CMSG_SPACE(4)` = 24 on 64-bit Linux),
/// aligned like a `cmsghdr`.
#[repr(C, align(8))]
struct ControlBuffer([u8; 32]);

/// Calls `f` with a one-byte message whose control buffer (`controllen` bytes of it) can carry
/// one descriptor; every buffer lives on this stack frame (no allocation: the child uses it).
fn with_message<R>(controllen: usize, f: impl FnOnce(&mut libc::msghdr) -> R) -> R {
    let mut byte = [0u8; 1];
    let mut control = ControlBuffer([0; 32]);
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: an all-zero msghdr is valid (no buffers); the fields set below point at buffers
    // that outlive `f`.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.0.as_mut_ptr().cast();
    message.msg_controllen = controllen.min(control.0.len());
    f(&mut message)
}

fn send_fd(sock: RawFd, fd: RawFd) -> io::Result<()> {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
    with_message(space, |message| {
        // SAFETY: the CMSG_* helpers compute offsets into the message's control buffer, which
        // has room for one descriptor; sendmsg(2) reads the message.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(message);
            if header.is_null() {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<RawFd>(), fd);
            if libc::sendmsg(sock, message, libc::MSG_NOSIGNAL) < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    })
}

fn receive_fd(sock: RawFd) -> io::Result<OwnedFd> {
    with_message(usize::MAX, |message| {
        // SAFETY: recvmsg(2) into the message's buffers; the received descriptor is taken into
        // an OwnedFd only when the kernel says one came (MSG_CMSG_CLOEXEC sets its flag).
        unsafe {
            if libc::recvmsg(sock, message, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) < 0 {
                return Err(io::Error::last_os_error());
            }
            let header = libc::CMSG_FIRSTHDR(message);
            if header.is_null()
                || (*header).cmsg_level != libc::SOL_SOCKET
                || (*header).cmsg_type != libc::SCM_RIGHTS
            {
                return Err(io::Error::other(
                    "the tool process sent no listening socket for its proxy",
                ));
            }
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<RawFd>());
            Ok(OwnedFd::from_raw_fd(fd))
        }
    })
}

/// Whether this host lets the worker give a process a network namespace: a short-lived
/// `true` started through the same steps (without the listener).
pub(crate) fn probe() -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let root = super::is_root();
    let program = ["/bin/true", "/usr/bin/true"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or("no `true` program to probe with")?;
    let mut command = std::process::Command::new(program);
    let maps = IdMaps::own();
    // SAFETY: the hook only makes raw system calls on memory owned by the closure.
    unsafe {
        command.pre_exec(move || enter_namespaces((!root).then_some(&maps)));
    }
    let what = if root {
        "unshare(CLONE_NEWNET)"
    } else {
        "unshare(CLONE_NEWUSER | CLONE_NEWNET) (unprivileged user namespaces)"
    };
    match command.status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("{what}: the probe exited with {status}")),
        Err(e) => Err(format!("{what} failed: {e}")),
    }
}
