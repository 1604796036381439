//! `scaler webhook`: the Flux shard-placement admission webhook.
pub mod index;
pub mod mutate;
pub mod review;

#[derive(Debug, clap::Args)]
pub struct Args {}

impl Args {
    pub async fn run(self) -> anyhow::Result<()> {
        anyhow::bail!("`webhook` is not implemented yet")
    }
}
