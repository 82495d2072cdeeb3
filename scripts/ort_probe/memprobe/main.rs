//! memprobe MODEL.onnx [opt=basic|disable|all] INPUT... -> prints ckpt_runtime::PeakStats as JSON
//! (fresh session, CSE off, memory pattern off, one intra-op thread).
//! INPUT is `name:d1xd2...` (float32, values cycle -3..3) or `name:i64:d1xd2...:lo:hi` (int64 in [lo, hi)).
use ckpt_runtime::{measure_peak, HostTensor, OptLevel, SessionConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    ckpt_runtime::init(None).expect("init ORT");
    let bytes = std::fs::read(&args[1]).unwrap();
    let mut cfg = SessionConfig::default();
    cfg.intra_threads = Some(1);
    let mut inputs = Vec::new();
    for a in &args[2..] {
        if let Some(l) = a.strip_prefix("opt=") {
            cfg.opt_level = match l {
                "disable" => OptLevel::Disable,
                "basic" => OptLevel::Basic,
                "extended" => OptLevel::Extended,
                "all" => OptLevel::All,
                _ => panic!("bad level {l}"),
            };
            continue;
        }
        let parts: Vec<&str> = a.split(':').collect();
        let dims = |s: &str| -> Vec<usize> {
            if s.is_empty() { vec![] } else { s.split('x').map(|d| d.parse().unwrap()).collect() }
        };
        if parts.len() == 5 && parts[1] == "i64" {
            let shape = dims(parts[2]);
            let (lo, hi): (i64, i64) = (parts[3].parse().unwrap(), parts[4].parse().unwrap());
            let n: usize = shape.iter().product();
            let vals: Vec<i64> = (0..n).map(|i| lo + (i as i64 * 7919) % (hi - lo).max(1)).collect();
            inputs.push(HostTensor::from_values(parts[0], shape, &vals).unwrap());
        } else {
            let shape = dims(parts[1]);
            let n: usize = shape.iter().product();
            let vals: Vec<f32> = (0..n).map(|i| ((i % 7) as f32 - 3.0) * 0.01).collect();
            inputs.push(HostTensor::from_values(parts[0], shape, &vals).unwrap());
        }
    }
    let stats = measure_peak(bytes.as_slice(), &inputs, &cfg).expect("measure");
    println!("{}", serde_json::to_string(&stats).unwrap());
}
