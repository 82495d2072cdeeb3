//! `scripts/gpu_check.sh` on a machine without a usable NVIDIA GPU: it says so and exits 0,
//! without looking for staged libraries or building anything. Both ways a machine can lack
//! one are staged with a PATH the test controls: no `nvidia-smi` at all, and an `nvidia-smi`
//! that lists no device.

mod common;

use common::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn check_with_path(path: &std::path::Path) -> std::process::Output {
    // The PATH given to the child is also where a bare program name is looked up: name bash
    // by its path.
    let bash = ["/bin/bash", "/usr/bin/bash"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("bash in /bin or /usr/bin");
    Command::new(bash)
        .arg(root().join("scripts/gpu_check.sh"))
        .arg(root().join("target/no-such-stage-dir"))
        .env("PATH", path)
        .output()
        .expect("run bash")
}

/// A directory holding only the tools the script's preamble uses.
fn bare_path() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for tool in ["dirname", "grep", "date", "mkdir"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{tool} not in /usr/bin or /bin"));
        std::os::unix::fs::symlink(found, dir.path().join(tool)).unwrap();
    }
    dir
}

#[test]
fn without_nvidia_smi_it_says_no_gpu_and_exits_0() {
    let dir = bare_path();
    let o = check_with_path(dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("gpu_check: no GPU"), "{}", stdout(&o));
}

#[test]
fn with_no_device_listed_it_says_no_gpu_and_exits_0() {
    let dir = bare_path();
    let smi = dir.path().join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n",
    )
    .unwrap();
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = check_with_path(dir.path());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("gpu_check: no GPU"), "{}", stdout(&o));
    // A device listed makes it go on, and fail on the missing stage directory.
    std::fs::write(&smi, "#!/bin/sh\necho 'GPU 0: Test (UUID: GPU-0)'\n").unwrap();
    let o = check_with_path(dir.path());
    assert_ne!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(stderr(&o).contains("gpu_stage.sh"), "{}", stderr(&o));
}
