#!/usr/bin/env bash
# Gradescope image setup (runs once, as root, when the autograder image is built).
# Installs the course tools into /autograder/venv, creates the unprivileged user student code runs as, and
# makes the staff-only files (reference solutions, rubric sources) unreadable for that user.
set -euo pipefail
SRC=/autograder/source

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq python3 python3-venv python3-pip util-linux >/dev/null

python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --quiet --upgrade pip
/autograder/venv/bin/pip install --quiet "$SRC"
/autograder/venv/bin/python -m nkisim install-fallback

# Student kernels run as this user (grader/sandbox.py: GRADER_SANDBOX_USER), never as root.
id -u asst4-student >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin asst4-student

# Staff-only material: root only.  The installed packages stay world-readable (the sandboxed child imports nkisim).
chmod -R go-rwx "$SRC"
chmod 755 /autograder

# Reference timings for this image's tool version (no-op when the shipped cache already has them).
GRADER_REFERENCE_DIR="$SRC/grader/reference" /autograder/venv/bin/python -m grader calibrate --target trn2 --if-missing
