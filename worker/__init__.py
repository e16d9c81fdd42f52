"""trialbot worker: runs trials on a GPU box. Imports no Slack or bot code."""
