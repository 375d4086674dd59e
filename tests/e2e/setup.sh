#!/usr/bin/env bash
# Installs the test-only npm packages (package.json at the repository root).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -d node_modules/openai ] || [ ! -d node_modules/@anthropic-ai/sdk ] || [ ! -d node_modules/node-llama-cpp ] ||
   [ package.json -nt node_modules ]; then
  npm install --no-audit --no-fund --loglevel=error
fi
