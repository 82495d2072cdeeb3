//! memprobe MODEL.onnx [opt=basic|disable] name:d1xd2... -> prints PeakStats JSON (fresh session, mem pattern off)
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
            cfg.opt_level = match l { "disable" => OptLevel::Disable, "basic" => OptLevel::Basic, "all" => OptLevel::All, _ => panic!() };
            continue;
        }
        let (name, shape) = a.split_once(':').unwrap();
        let shape: Vec<usize> = shape.split('x').map(|d| d.parse().unwrap()).collect();
        let n: usize = shape.iter().product();
        let vals: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
        inputs.push(HostTensor::from_values(name, shape, &vals).unwrap());
    }
    let stats = measure_peak(bytes.as_slice(), &inputs, &cfg).expect("measure");
    println!("{}", serde_json::to_string(&stats).unwrap());
}
