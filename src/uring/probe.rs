//! Whether this process can run the io_uring path at all, asked once at start: the ring's
//! flags, the provided-buffer ring and every operation the path submits. A refusal puts every
//! worker on epoll with one log line, and its reason stays for `/status` and `doctor`.

use std::io;
use std::sync::OnceLock;

use io_uring::opcode;

use super::driver::Driver;

/// Why this process runs on epoll although `io = "uring"` (the default): `None` until
/// [`probe`] has run, or when the kernel gave a ring.
static REFUSED: OnceLock<Option<String>> = OnceLock::new();

/// Whether this kernel gives this process a ring with every operation the I/O path uses,
/// asked once per process (by the first worker that starts): a refusal (an old kernel,
/// `kernel.io_uring_disabled`, a seccomp filter such as a container runtime's default) is
/// logged once and kept for `/status` and `doctor`, and every worker runs on epoll.
pub fn probe() -> Result<(), &'static str> {
    let refused = REFUSED.get_or_init(|| {
        let why = check().err()?;
        tracing::warn!("io_uring is not available ({why}): the workers run on epoll");
        Some(why.to_string())
    });
    match refused {
        Some(why) => Err(why),
        None => Ok(()),
    }
}

/// The reason the last [`probe`] gave for epoll, if it refused the ring.
pub fn refused() -> Option<&'static str> {
    REFUSED.get().and_then(Option::as_deref)
}

/// A worker's ring as [`Driver::new`] builds it (its flags and buffer ring), then the
/// operations, named if one is missing (`IORING_REGISTER_PROBE`).
fn check() -> io::Result<()> {
    drop(Driver::new()?);
    let ring = io_uring::IoUring::new(2)?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    let used = [
        (opcode::Recv::CODE, "RECV"),
        (opcode::Send::CODE, "SEND"),
        (opcode::SendMsg::CODE, "SENDMSG"),
        (opcode::PollAdd::CODE, "POLL_ADD"),
        (opcode::AsyncCancel::CODE, "ASYNC_CANCEL"),
        (opcode::Close::CODE, "CLOSE"),
        (opcode::AcceptMulti::CODE, "ACCEPT"),
    ];
    match used.iter().find(|(code, _)| !probe.is_supported(*code)) {
        Some((_, name)) => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("the kernel lacks IORING_OP_{name}"),
        )),
        None => Ok(()),
    }
}
