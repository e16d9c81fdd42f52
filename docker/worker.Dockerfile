# A trialbot worker on a GPU box: the official PyTorch CUDA runtime image, with
# the worker installed beside the image's own torch (never replaced).
#   docker build -f docker/worker.Dockerfile -t trialbot-worker .
# docs/deploy.md has the run commands; tests/test_deploy.py holds the install
# commands here to the ones documented there.
FROM pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime

WORKDIR /opt/trialbot
# The worker alone: no bot/ in the image, so no Slack code can reach a GPU box.
COPY pyproject.toml README.md ./
COPY worker ./worker

# The constraint pins the image's torch build, so pip fails rather than swap it.
RUN python -c 'import torch; print("torch==" + torch.__version__)' > /tmp/keep-torch.txt \
    && pip install --no-cache-dir -c /tmp/keep-torch.txt . \
    && trialbot-worker trial help > /dev/null

# An unprivileged account for trials: run with --trial-user trial.
RUN useradd --create-home trial

# docker stop's signal: the trial gets --stop-grace, then goes back to the queue.
STOPSIGNAL SIGTERM
ENTRYPOINT ["trialbot-worker"]
