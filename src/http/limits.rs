//! Resource bounds of the HTTP layer: the server-wide allowance for large bodies being read and
//! parsed, the request timeout and the gate that keeps it from cutting a release after its
//! commit started, and the write timeout of a connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::CONTENT_LENGTH;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

use super::error::ApiError;
use super::AppState;

/// Bodies smaller than this are not counted against the allowance.
const SMALL_BODY: usize = 64 * 1024;

/// The declared `Content-Length`, if any and well-formed.
pub fn content_length(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// The bytes of request bodies that may be read and parsed at once, in KiB permits. A body takes
/// its declared length (or the body limit when it declares none) for as long as it is read and
/// parsed; one that does not fit waits, within the request timeout (503 `timeout`, not charged).
pub struct Bodies {
    permits: Arc<Semaphore>,
    total_kib: u32,
}

impl Bodies {
    pub fn new(total_bytes: usize) -> Bodies {
        let total_kib = u32::try_from(total_bytes.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(1, Semaphore::MAX_PERMITS as u32);
        Bodies {
            permits: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
        }
    }

    pub async fn admit(
        &self,
        declared: Option<u64>,
        max_body_bytes: usize,
    ) -> Result<Option<OwnedSemaphorePermit>, ApiError> {
        let declared = declared
            .map_or(max_body_bytes, |n| usize::try_from(n).unwrap_or(usize::MAX))
            .min(max_body_bytes);
        if declared < SMALL_BODY {
            return Ok(None);
        }
        let kib = u32::try_from(declared.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .min(self.total_kib);
        self.permits
            .clone()
            .acquire_many_owned(kib)
            .await
            .map(Some)
            .map_err(|_| ApiError::Unavailable)
    }
}

const OPEN: u8 = 0;
const COMMITTING: u8 = 1;
const CUT: u8 = 2;

/// Decides, once per request, whether the request timeout or the release commit came first. The
/// timeout may cut a request only while the gate is open; a release passes it right before its
/// commit starts, after which the client gets the commit's answer (for as long as
/// [`request_timeout`] waits for it). So a 503 `timeout` never hides a charge.
#[derive(Clone, Default)]
pub struct CommitGate(Arc<AtomicU8>);

impl CommitGate {
    /// True when the commit may start; false when the timeout already answered the request.
    pub fn begin_commit(&self) -> bool {
        self.0
            .compare_exchange(OPEN, COMMITTING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// True when the timeout may answer (no commit has started); closes the gate for good.
    pub fn cut(&self) -> bool {
        self.0
            .compare_exchange(OPEN, CUT, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for CommitGate {
    type Rejection = std::convert::Infallible;

    /// The gate the timeout layer installed, or an open one when there is no such layer.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<CommitGate>()
            .cloned()
            .unwrap_or_default())
    }
}

/// The whole-request timeout, rendered as a problem (tower-http's would answer an empty 408).
/// It cuts a request only before a release commit starts ([`CommitGate`]), so 503 `timeout`
/// always means "not charged". Once the commit started, the request gets the commit's answer:
/// 201, 409, or 503 `service-unavailable` when the database refused or rolled it back — for as
/// long as a database that is up may take to give one ([`LedgerStore::commit_answer_bound`]: its
/// own lock, busy and statement deadlines end every commit before that). Only a commit still
/// unanswered then (a frozen or cut-off database) is 504 `commit-outcome-unknown`: bounded, and
/// never claiming "not charged". The commit itself runs in a task of its own that neither this
/// bound nor a departed client cuts (`releases::create`), so a 504 means "not known yet", and a
/// retry with the same `Idempotency-Key` tells.
///
/// [`LedgerStore::commit_answer_bound`]: crate::ledger::LedgerStore::commit_answer_bound
pub async fn request_timeout(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let gate = CommitGate::default();
    req.extensions_mut().insert(gate.clone());
    let response = next.run(req);
    tokio::pin!(response);
    tokio::select! {
        response = &mut response => response,
        () = tokio::time::sleep(state.settings.request_timeout()) => {
            if gate.cut() {
                ApiError::Timeout.into_response()
            } else {
                tokio::time::timeout(state.store.commit_answer_bound(), response)
                    .await
                    .unwrap_or_else(|_| ApiError::CommitUnanswered.into_response())
            }
        }
    }
}

/// A connection whose writes make no progress for `timeout` fails with `TimedOut`, so that a
/// client that stops reading cannot pin a response (and its memory) for longer than that.
pub struct WriteTimeout<T> {
    inner: T,
    timeout: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteTimeout<T> {
    pub fn new(inner: T, timeout: Duration) -> Self {
        WriteTimeout {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// After a `Pending` write: start the clock (once), and fail when it ran out.
    fn check_stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let timeout = self.timeout;
        let sleep = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing within the write timeout",
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<R>(
        &mut self,
        poll: Poll<io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        match poll {
            Poll::Pending => match self.check_stall(cx) {
                Poll::Ready(e) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            },
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(poll, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(poll, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(poll, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_lets_exactly_one_side_through() {
        let gate = CommitGate::default();
        assert!(gate.begin_commit());
        assert!(!gate.cut(), "a started commit cannot be cut");
        let gate = CommitGate::default();
        assert!(gate.cut());
        assert!(!gate.begin_commit(), "a cut request cannot commit");
    }

    #[tokio::test]
    async fn a_stalled_write_times_out() {
        use tokio::io::AsyncWriteExt;
        // A pipe nobody reads: writes stall once its buffer is full.
        let (client, _server) = tokio::io::duplex(1024);
        let mut io = WriteTimeout::new(client, Duration::from_millis(200));
        let err = io.write_all(&vec![0u8; 1 << 20]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }
}
