//! When cold keys go to the backend (pure: the caller passes the time in). A cold key while no
//! other cold evaluation is in flight goes at once, alone, so one new ScaledObject, or a client
//! asking one at a time, waits for nothing. A cold key that arrives while one is in flight (a
//! burst: a scaler start, KEDA asking for the whole fleet at once) opens a gathering window:
//! every cold key arriving in it joins one batch, sent as soon as it fills a query, else when the
//! window ends. So a burst costs one query per full batch plus at most one per window, instead of
//! one per key, and each of its keys waits at most the window. (Two other rules were tried with
//! tests/scaler/test_restart.py: closing a window early once keys stop arriving gave batches of 1,
//! 3, 6, 12 … for a client whose calls trickle in; "quiet" as "nothing sent for a window" made a
//! client asking one key at a time wait a window for each.)
use std::time::{Duration, Instant};

/// What to do with a key that just arrived.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival<T> {
    /// Send these now (the key alone, or a batch that just filled a query); call
    /// [`Gathering::done`] when their evaluation has ended.
    Send(Vec<T>),
    /// The key opened window `generation`: call [`Gathering::closes_at`] and [`Gathering::close`]
    /// until it is sent.
    Opened(u64),
    /// The key joined the open window.
    Joined,
}

#[derive(Debug)]
pub struct Gathering<T> {
    window: Duration,
    /// Most keys in one batch (one query's worth).
    limit: usize,
    pending: Vec<T>,
    /// The open window: its generation and when it opened.
    open: Option<(u64, Instant)>,
    generation: u64,
    /// Cold evaluations sent and not done.
    in_flight: usize,
}

impl<T> Gathering<T> {
    /// `window` zero sends every key alone, at once.
    pub fn new(window: Duration, limit: usize) -> Self {
        Self {
            window,
            limit: limit.max(1),
            pending: Vec::new(),
            open: None,
            generation: 0,
            in_flight: 0,
        }
    }

    pub fn arrive(&mut self, key: T, now: Instant) -> Arrival<T> {
        if self.open.is_some() {
            self.pending.push(key);
            if self.pending.len() >= self.limit {
                return Arrival::Send(self.take());
            }
            return Arrival::Joined;
        }
        if self.in_flight == 0 || self.window.is_zero() || self.limit == 1 {
            self.in_flight += 1;
            return Arrival::Send(vec![key]);
        }
        self.generation += 1;
        self.pending.push(key);
        self.open = Some((self.generation, now));
        Arrival::Opened(self.generation)
    }

    /// When window `generation` closes; `None` once it was sent.
    pub fn closes_at(&self, generation: u64) -> Option<Instant> {
        let (open, opened) = self.open?;
        (open == generation).then(|| opened + self.window)
    }

    /// The batch of window `generation` when it is due at `now`.
    pub fn close(&mut self, generation: u64, now: Instant) -> Option<Vec<T>> {
        let at = self.closes_at(generation)?;
        (now >= at).then(|| self.take())
    }

    /// One sent evaluation has ended.
    pub fn done(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    fn take(&mut self) -> Vec<T> {
        self.open = None;
        self.in_flight += 1;
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_lone_key_goes_at_once_and_a_burst_gathers() {
        let t = Instant::now();
        let mut g = Gathering::new(200 * MS, 100);
        assert_eq!(g.arrive(1, t), Arrival::Send(vec![1]));
        // While it is in flight: a window opens, and keys arriving in it join.
        assert_eq!(g.arrive(2, t + MS), Arrival::Opened(1));
        for (i, key) in (3..10).enumerate() {
            assert_eq!(g.arrive(key, t + (2 + 5 * i as u32) * MS), Arrival::Joined);
        }
        assert_eq!(g.closes_at(1), Some(t + 201 * MS));
        assert_eq!(g.close(1, t + 200 * MS), None);
        assert_eq!(g.close(1, t + 201 * MS), Some((2..10).collect()));
        assert_eq!(g.closes_at(1), None);
        // Both evaluations done: the next key goes alone, at once.
        g.done();
        assert_eq!(g.arrive(10, t + 202 * MS), Arrival::Opened(2));
        g.done();
        assert_eq!(g.close(2, t + 402 * MS), Some(vec![10]));
        g.done();
        assert_eq!(g.arrive(11, t + 403 * MS), Arrival::Send(vec![11]));
        // A client asking one key at a time never waits.
        g.done();
        assert_eq!(g.arrive(12, t + 404 * MS), Arrival::Send(vec![12]));
    }

    #[test]
    fn a_full_batch_goes_at_once() {
        let t = Instant::now();
        let mut g = Gathering::new(200 * MS, 3);
        g.arrive(0, t);
        assert_eq!(g.arrive(1, t), Arrival::Opened(1));
        assert_eq!(g.arrive(2, t), Arrival::Joined);
        assert_eq!(g.arrive(3, t), Arrival::Send(vec![1, 2, 3]));
        assert_eq!(g.close(1, t + 500 * MS), None);
        assert_eq!(g.arrive(4, t + MS), Arrival::Opened(2));
    }

    #[test]
    fn no_window_sends_every_key_alone() {
        let t = Instant::now();
        let mut g = Gathering::new(Duration::ZERO, 100);
        for key in 0..5 {
            assert_eq!(g.arrive(key, t), Arrival::Send(vec![key]));
        }
    }
}
