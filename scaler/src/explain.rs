//! TODO(owner of this module): replace this placeholder.

#[derive(Debug, clap::Args)]
pub struct Args {}

impl Args {
    pub async fn run(self) -> anyhow::Result<()> {
        anyhow::bail!("`explain` is not implemented yet")
    }
}
