"""The hook names, as constants: a leaf every layer may import (the public home is
``agentloop_nb.hooks``, which re-exports them with the rest of the hook catalogue)."""

from __future__ import annotations

AGENT_CREATED = "agent/created"
AGENT_SESSION_START = "agent/session-start"
AGENT_DISPOSED = "agent/disposed"
AGENT_STATUS = "agent/status"
AGENT_ERROR = "agent/error"
AGENT_INBOX_INSERTED = "agent/inbox/inserted"
AGENT_INBOX_DISCARDED = "agent/inbox/discarded"
AGENT_INBOX_CLAIMED = "agent/inbox/claimed"
AGENT_PRE_STEP = "agent/pre-step"
AGENT_REQUEST = "agent/request"
AGENT_REQUEST_ERROR = "agent/request-error"
AGENT_TURN_STOPPING = "agent/turn-stopping"
TOOLS_PRE_EXECUTE = "tools/pre-execute"
TOOLS_EXECUTE = "tools/execute"
TOOLS_POST_EXECUTE = "tools/post-execute"
TOOLS_SETTLED = "tools/settled"
TOOLS_RESULT = "tools/result"
LLM_STREAM = "llm/stream"
SYSTEM_PROMPT_ASSEMBLE = "system-prompt/assemble"
SESSION_CREATED = "session/created"
SESSION_DISPOSED = "session/disposed"
SESSION_EVENT = "session/event"
SESSION_CHUNK = "session/chunk"
SESSION_FLUSH = "session/flush"
INTERNAL_ERROR = "internal/error"

# Every name above: `Context.on` warns when a listener's name is a near miss of one of these.
CATALOGUED = frozenset(value for key, value in dict(globals()).items() if key.isupper())
