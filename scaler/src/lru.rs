//! The one eviction policy of the scaler's bounded maps (the decision cache, the parsed-metadata
//! cache): when a new key finds the map full, the least recently asked sixteenth of the capacity
//! (at least one key) goes at once, so the scan of every entry is amortised over the inserts that
//! follow instead of repeated on each.
use std::collections::HashMap;
use std::hash::Hash;

/// The keys to evict from a full `entries` of `capacity`: those whose `last_asked` is oldest.
pub fn least_recent<K, V, A>(
    entries: &HashMap<K, V>,
    capacity: usize,
    last_asked: impl Fn(&V) -> A,
) -> Vec<K>
where
    K: Clone + Eq + Hash,
    A: Ord,
{
    let mut ages: Vec<(A, &K)> = entries.iter().map(|(k, v)| (last_asked(v), k)).collect();
    let count = (capacity / 16).clamp(1, ages.len().max(1));
    if count < ages.len() {
        ages.select_nth_unstable_by(count, |a, b| a.0.cmp(&b.0));
        ages.truncate(count);
    }
    ages.into_iter().map(|(_, k)| k.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_sixteenth_goes_and_at_least_one() {
        let entries: HashMap<u32, u32> = (0..32).map(|k| (k, 100 - k)).collect();
        let mut oldest = least_recent(&entries, 32, |asked| *asked);
        oldest.sort();
        assert_eq!(oldest, [30, 31]);
        assert_eq!(least_recent(&entries, 8, |asked| *asked), [31]);
        let empty: HashMap<u32, u32> = HashMap::new();
        assert!(least_recent(&empty, 8, |asked| *asked).is_empty());
    }
}
