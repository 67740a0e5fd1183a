# Image for both processes: `docker build -t kueue-federation .`
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY kube_runtime ./kube_runtime
COPY kueue_domain ./kueue_domain
COPY worker_agent ./worker_agent
COPY manager ./manager
RUN pip install --no-cache-dir .
USER 65532:65532
ENTRYPOINT ["python"]
