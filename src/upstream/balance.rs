//! Choosing a server within an upstream group. Each worker keeps one [`Balancer`] per group, so
//! there is no shared state to contend on and two groups never disturb each other's rotation.
//!
//! [`Balancer::pick`] chooses; [`Balancer::report`] tells how the request on that server ended.
//! Round-robin ignores the reports for its choice; the counts they keep (in flight, consecutive
//! failures) are what least-connections, passive health and retries read.

use std::cell::Cell;

use crate::error::Kind;

/// How a request on a picked server ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server answered (any status) and the exchange finished.
    Success,
    /// The server failed this way (refused, timed out, closed, answered badly).
    Failure(Kind),
    /// The request ended for a reason that says nothing of the server (the client left).
    Abandoned,
}

/// One worker's state for one upstream group.
#[derive(Debug)]
pub struct Balancer {
    next: Cell<usize>,
    servers: Box<[ServerState]>,
}

#[derive(Debug, Default)]
struct ServerState {
    in_flight: Cell<u32>,
    consecutive_failures: Cell<u32>,
}

impl Balancer {
    /// A balancer over `servers` servers whose rotation starts at `start` (workers start at
    /// different offsets to spread load).
    pub fn new(servers: usize, start: usize) -> Balancer {
        Balancer {
            next: Cell::new(start),
            servers: (0..servers.max(1))
                .map(|_| ServerState::default())
                .collect(),
        }
    }

    /// The index of the server for the next request; it counts as in flight until
    /// [`Balancer::report`] is called for it.
    pub fn pick(&self) -> usize {
        let n = self.next.get();
        self.next.set(n.wrapping_add(1));
        let server = n % self.servers.len();
        let s = &self.servers[server];
        s.in_flight.set(s.in_flight.get() + 1);
        server
    }

    /// Records how the request sent to `server` ended.
    pub fn report(&self, server: usize, outcome: Outcome) {
        let Some(s) = self.servers.get(server) else {
            return;
        };
        s.in_flight.set(s.in_flight.get().saturating_sub(1));
        match outcome {
            Outcome::Success => s.consecutive_failures.set(0),
            Outcome::Failure(_) => s.consecutive_failures.set(s.consecutive_failures.get() + 1),
            Outcome::Abandoned => {}
        }
    }

    /// Requests picked for `server` and not yet reported.
    pub fn in_flight(&self, server: usize) -> u32 {
        self.servers.get(server).map_or(0, |s| s.in_flight.get())
    }

    /// Failures reported for `server` since its last success.
    pub fn consecutive_failures(&self, server: usize) -> u32 {
        self.servers
            .get(server)
            .map_or(0, |s| s.consecutive_failures.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_from_the_start_offset() {
        let b = Balancer::new(3, 1);
        let picks: Vec<usize> = (0..6).map(|_| b.pick()).collect();
        assert_eq!(picks, [1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn reports_track_in_flight_and_failures() {
        let b = Balancer::new(2, 0);
        let s = b.pick();
        assert_eq!(b.in_flight(s), 1);
        b.report(s, Outcome::Failure(Kind::ConnectFailed));
        b.report(s, Outcome::Failure(Kind::UpstreamTimeout));
        assert_eq!(b.in_flight(s), 0);
        assert_eq!(b.consecutive_failures(s), 2);
        b.report(s, Outcome::Success);
        assert_eq!(b.consecutive_failures(s), 0);
        b.report(7, Outcome::Success); // an index from an older config is ignored
    }
}
