//! When cold keys go to the backend (pure: the caller passes the time in). A cold key after a
//! quiet spell (no cold key sent for a window's length) goes at once, alone, so one new
//! ScaledObject waits for nothing. A cold key that arrives sooner opens a gathering window: every
//! cold key arriving in it joins one batch, sent as soon as it fills a query, else when the window
//! ends. So a burst (a scaler start, KEDA asking for the whole fleet at once) costs one query per
//! full batch plus at most one per window, instead of one per key, and each key waits at most the
//! window. (An early close once keys stop arriving was tried: a client whose calls trickle in, as
//! the test suite's does, then got batches of 1, 3, 6, 12 … instead of full ones.)
use std::time::{Duration, Instant};

/// What to do with a key that just arrived.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival<T> {
    /// Send these now (the key alone after quiet, or a batch that just filled a query).
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
    /// When the last batch (or lone key) was sent.
    last_sent: Option<Instant>,
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
            last_sent: None,
        }
    }

    pub fn arrive(&mut self, key: T, now: Instant) -> Arrival<T> {
        if self.open.is_some() {
            self.pending.push(key);
            if self.pending.len() >= self.limit {
                return Arrival::Send(self.take(now));
            }
            return Arrival::Joined;
        }
        let quiet = self
            .last_sent
            .is_none_or(|at| now.saturating_duration_since(at) >= self.window);
        if quiet || self.limit == 1 {
            self.last_sent = Some(now);
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
        (now >= at).then(|| self.take(now))
    }

    fn take(&mut self, now: Instant) -> Vec<T> {
        self.open = None;
        self.last_sent = Some(now);
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
        // Soon after: a window opens, and keys arriving in it join.
        assert_eq!(g.arrive(2, t + MS), Arrival::Opened(1));
        for (i, key) in (3..10).enumerate() {
            assert_eq!(g.arrive(key, t + (2 + 5 * i as u32) * MS), Arrival::Joined);
        }
        assert_eq!(g.closes_at(1), Some(t + 201 * MS));
        assert_eq!(g.close(1, t + 200 * MS), None);
        assert_eq!(g.close(1, t + 201 * MS), Some((2..10).collect()));
        assert_eq!(g.closes_at(1), None);
        // Sooner than a window after a send, a key waits; a window later, it goes alone again.
        assert_eq!(g.arrive(10, t + 400 * MS), Arrival::Opened(2));
        assert_eq!(g.close(2, t + 600 * MS), Some(vec![10]));
        assert_eq!(g.arrive(11, t + 800 * MS), Arrival::Send(vec![11]));
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
