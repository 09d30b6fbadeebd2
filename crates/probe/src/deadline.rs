//! Reading a whole setup exchange against one deadline. A per-read timeout alone lets a
//! client that trickles a byte every few seconds hold a connection (and its thread)
//! for as long as it likes; the services read their setup messages through a
//! [`DeadlineReader`] instead.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Reads from `stream` until `deadline` in total; leaves the socket's read timeout as
/// it found it when dropped.
pub struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
    previous_timeout: Option<Duration>,
}

impl<'a> DeadlineReader<'a> {
    /// A reader that gives up `within` from now.
    pub fn new(stream: &'a TcpStream, within: Duration) -> io::Result<DeadlineReader<'a>> {
        Ok(DeadlineReader {
            stream,
            deadline: Instant::now() + within,
            previous_timeout: stream.read_timeout()?,
        })
    }
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(too_late());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut stream = self.stream;
        // A read timeout shows as EAGAIN on Linux; either way it is the deadline.
        stream.read(buf).map_err(|error| match error.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => too_late(),
            _ => error,
        })
    }
}

fn too_late() -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        "the peer did not complete its setup messages in time",
    )
}

impl Drop for DeadlineReader<'_> {
    fn drop(&mut self) {
        let _ = self.stream.set_read_timeout(self.previous_timeout);
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    use super::DeadlineReader;

    #[test]
    fn a_trickling_peer_is_cut_off_at_the_deadline_not_per_read() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let trickler = std::thread::spawn(move || {
            // A byte every 50 ms: each read succeeds long before a per-read timeout.
            for _ in 0..200 {
                if client.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let mut message = [0u8; 100];
        let error = DeadlineReader::new(&server, Duration::from_millis(500))
            .unwrap()
            .read_exact(&mut message)
            .unwrap_err();
        // With per-read timeouts only, the 100 bytes would have arrived (after 5 s).
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut, "{error}");
        assert_eq!(
            server.read_timeout().unwrap(),
            Some(Duration::from_secs(30)),
            "the socket's own timeout is restored"
        );
        drop(server);
        trickler.join().unwrap();
    }
}
