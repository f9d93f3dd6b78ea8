"""KnowGIC leaderboard: a Gradio app over the runner's results store and queue."""
