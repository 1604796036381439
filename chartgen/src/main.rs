//! chartgen: renders KEDA autoscaling into app charts, helm-controller shard Deployments and
//! the platform package chart (the app pieces from minijinja templates in `templates/app/`, built
//! into the binary).
#![forbid(unsafe_code)]

mod app;
mod cli;
mod output;
mod package;
mod render;
mod shards;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    match cli::Cli::parse().run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("chartgen: error: {err:#}");
            ExitCode::from(2)
        }
    }
}
