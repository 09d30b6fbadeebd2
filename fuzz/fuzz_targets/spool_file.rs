//! The agent's result spool reading files it finds on disk (after a crash, a full disk,
//! an operator's edit): any content is either a result upload or moved aside as
//! `NAME.corrupt`, so it never blocks the results behind it, and a result read back is
//! spooled and read again unchanged.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use vantage_agent::spool::{Spool, SpoolError};

fn spool() -> &'static (tempfile::TempDir, Spool) {
    static SPOOL: OnceLock<(tempfile::TempDir, Spool)> = OnceLock::new();
    SPOOL.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let spool = Spool::open(dir.path()).expect("the spool opens");
        (dir, spool)
    })
}

fuzz_target!(|bytes: &[u8]| {
    let (dir, spool) = spool();
    let path = dir.path().join("input.fuzz");
    std::fs::write(&path, bytes).expect("the file is written");
    match spool.read(&path) {
        Ok(upload) => {
            spool
                .store(&upload)
                .expect("a result read back spools again");
            assert!(spool.contains(&upload.run_id));
            let files = spool.pending_files().expect("the spool lists");
            let stored = files
                .iter()
                .map(|file| spool.read(file).expect("a spooled result reads"))
                .find(|stored| stored.run_id == upload.run_id)
                .expect("the stored result is listed");
            assert_eq!(stored.run_id, upload.run_id);
            assert_eq!(stored.agent, upload.agent);
            assert_eq!(stored.outcome, upload.outcome);
            spool.remove(&upload.run_id).expect("the result is removed");
            std::fs::remove_file(&path).expect("the input is removed");
        }
        Err(SpoolError::Corrupt { .. }) => {
            assert!(!path.exists(), "a corrupt file stayed in the spool's way");
            let aside = path.with_extension("corrupt");
            assert!(aside.exists(), "a corrupt file was not kept aside");
            std::fs::remove_file(aside).expect("the corrupt copy is removed");
        }
        Err(error) => panic!("reading a spool file failed: {error}"),
    }
});
