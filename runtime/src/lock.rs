//! Locks that recover from poisoning. A poisoned `std::sync` lock only records that some holder
//! panicked; every holder here keeps the data consistent between statements (a map insert, a
//! value swap), so the data is still good and the next caller carries on with it instead of
//! panicking in turn.
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn read<T: ?Sized>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(PoisonError::into_inner)
}

pub fn write<T: ?Sized>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_holder_does_not_poison_the_next_caller() {
        let (m, rw) = (Mutex::new(1), RwLock::new(1));
        std::thread::scope(|s| {
            let _ = s
                .spawn(|| {
                    let (_m, _rw) = (lock(&m), write(&rw));
                    panic!("holder panics");
                })
                .join();
        });
        assert!(m.is_poisoned() && rw.is_poisoned());
        *lock(&m) += 1;
        *write(&rw) += 1;
        assert_eq!((*lock(&m), *read(&rw)), (2, 2));
    }
}
