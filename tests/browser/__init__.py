"""Real-browser tests: JupyterLab + ipywidgets front end in headless Chromium via Playwright."""
