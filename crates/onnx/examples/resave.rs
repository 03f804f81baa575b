//! Loads an ONNX model and saves it again: `resave IN OUT [inline|auto[=BYTES]|file=NAME] [--inline-functions]`.
//! Used to check by hand (with tools/check_convert.py) that written models are accepted by onnx and
//! onnxruntime.

use std::process::ExitCode;

use memplan_onnx::{
    inline_functions, load_model_proto, save_model_proto_with, ExternalData, ExternalDataReader,
};

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let inline = args.iter().any(|a| a == "--inline-functions");
    args.retain(|a| a != "--inline-functions");
    if args.len() < 2 || args.len() > 3 {
        eprintln!("usage: resave IN OUT [inline|auto[=BYTES]|file=NAME] [--inline-functions]");
        return ExitCode::from(2);
    }
    let mode = match args.get(2).map(String::as_str).unwrap_or("inline") {
        "inline" => ExternalData::Inline,
        "auto" => ExternalData::Auto { threshold: 1024 },
        m if m.starts_with("auto=") => match m[5..].parse() {
            Ok(threshold) => ExternalData::Auto { threshold },
            Err(_) => {
                eprintln!("resave: '{m}': threshold is not a byte count");
                return ExitCode::from(2);
            }
        },
        m if m.starts_with("file=") => ExternalData::File(m[5..].to_string()),
        m => {
            eprintln!("resave: unknown mode '{m}'");
            return ExitCode::from(2);
        }
    };
    let input = std::path::Path::new(&args[0]);
    let result = load_model_proto(input).and_then(|mut m| {
        if inline {
            inline_functions(&mut m)?;
        }
        let mut reader = ExternalDataReader::new(memplan_onnx::load::model_dir(input));
        save_model_proto_with(&m, &args[1], mode, &mut reader)
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("resave: {e}");
            ExitCode::FAILURE
        }
    }
}
