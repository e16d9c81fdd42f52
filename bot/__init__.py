"""trialbot's bot: the Slack app, the console, the store and the worker API."""
