//! `cargo xtask prebuild`: everything the tests need that is not Rust, built or found in the
//! cache, each item timed: the control-plane binaries (Go), the local S3 server and the Helm binary (Go) and the root
//! filesystems of the database images (`mmdebstrap`). The tests build each of these on first
//! use anyway; `.ci/run` starts this in the background right after xtask itself is built, so
//! that on a fresh machine the Go builds and the image roots overlap the Rust builds instead of
//! following them (see docs/development.md, "CI's time").

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use xtask::cluster::Progress;
use xtask::cluster::images::{self, ImageTable, recipes};

/// Builds or finds every item; fails naming each item that could not be had, after trying all.
pub fn run(workspace_root: &Path) -> Result<()> {
    let progress = Progress::new(false);
    let mut failed = Vec::new();
    let mut timed = |what: &str, f: &mut dyn FnMut() -> Result<String>| {
        let started = Instant::now();
        match f() {
            Ok(done) => progress.step(format!(
                "prebuild: {what}: {done} ({:.1}s)",
                started.elapsed().as_secs_f64()
            )),
            Err(e) => {
                progress.step(format!(
                    "prebuild: {what} FAILED after {:.1}s: {e:#}",
                    started.elapsed().as_secs_f64()
                ));
                failed.push(what.to_owned());
            }
        }
    };
    timed("control-plane binaries", &mut || {
        let binaries = xtask::cluster::ensure_binaries(false)?;
        Ok(binaries.bin_dir().display().to_string())
    });
    timed("S3 server", &mut || {
        let s3 = xtask::cluster::s3::ensure(workspace_root, &progress)?;
        Ok(s3.path().display().to_string())
    });
    timed("helm", &mut || {
        let helm = xtask::cluster::helm::ensure(workspace_root, &progress)?;
        Ok(helm.path().display().to_string())
    });
    let table = ImageTable::new(images::default_cache_dir()?, None);
    for recipe in recipes().iter().filter(|r| r.is_database()) {
        timed(&format!("image root {}", recipe.name), &mut || {
            let (root, version) = table
                .ensure(recipe)
                .with_context(|| format!("building the {} root", recipe.name))?;
            Ok(format!("{version} in {}", root.display()))
        });
    }
    if !failed.is_empty() {
        bail!("prebuild could not build: {}", failed.join(", "));
    }
    Ok(())
}
