//! A client that insists on writing to one member, whatever its read-only setting says:
//! PostgreSQL's `BEGIN READ WRITE` overrides `default_transaction_read_only`, the fence a
//! switchover sets first. Pointed at the old primary during a switchover, it proves the fence
//! before the promotion is hard (issue 34, item 7): every row it had acknowledged must be on
//! the new primary afterwards (rows it wrote on the old primary after the promotion would be
//! rewound away: acknowledged and lost).

use super::*;

/// The first id of the insistent writer's rows (the ordinary writer counts from 1).
const FIRST_ID: u64 = 10_000_000;

pub(crate) struct Insistent {
    acked: Arc<Mutex<Vec<u64>>>,
    refused: Arc<Mutex<usize>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The statement that writes row `id` in an explicitly read-write transaction.
fn insist(engine: Engine, id: u64) -> String {
    match engine {
        Engine::Postgresql => {
            format!(
                "begin read write; insert into {} values ({id}); commit",
                table(engine)
            )
        }
        // MySQL and MariaDB have no per-transaction override of read_only for ordinary
        // accounts; the statement is the plain insert.
        Engine::Mariadb | Engine::Mysql => format!("insert into {} values ({id})", table(engine)),
    }
}

impl Insistent {
    /// Starts writing to `ip` (one row at a time, a short pause between).
    pub(crate) fn start(engine: Engine, root: PathBuf, password: String, ip: String) -> Self {
        let acked: Arc<Mutex<Vec<u64>>> = Arc::default();
        let refused: Arc<Mutex<usize>> = Arc::default();
        let stop: Arc<AtomicBool> = Arc::default();
        let (a, r, s) = (acked.clone(), refused.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut next = FIRST_ID;
            while !s.load(Ordering::Relaxed) {
                match sql_within(engine, &root, &ip, &password, &insist(engine, next), 1) {
                    Ok(_) => lock(&a).push(next),
                    Err(_) => *lock(&r) += 1,
                }
                // A failed attempt may still have committed: never reuse its id.
                next += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Insistent {
            acked,
            refused,
            stop,
            thread: Some(thread),
        }
    }

    /// How many rows it has had acknowledged so far.
    pub(crate) fn acked(&self) -> usize {
        lock(&self.acked).len()
    }

    /// Stops it: the acknowledged ids and the count of refused attempts.
    pub(crate) fn finish(mut self) -> (Vec<u64>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        (lock(&self.acked).clone(), *lock(&self.refused))
    }
}

impl Drop for Insistent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The insistent writer's acknowledged rows missing on `ip` (the new primary).
pub(crate) fn insistent_rows_lost(
    engine: Engine,
    root: &PathBuf,
    ip: &str,
    password: &str,
    acked: &[u64],
) -> Result<Vec<u64>> {
    let present = ids_on(engine, root, ip, password)?;
    Ok(acked
        .iter()
        .filter(|id| !present.contains(id))
        .copied()
        .collect())
}
