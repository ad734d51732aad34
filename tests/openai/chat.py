#!/usr/bin/env python3
"""Drives `posenc serve`'s OpenAI-compatible endpoint with OpenAI's own Python client.

    tests/openai/.venv/bin/python tests/openai/chat.py http://127.0.0.1:PORT/ MODEL PROMPT

For MODEL and a one-message conversation PROMPT, greedy: the models listed, the answer
whole, the answer streamed (with the usage chunk), the answer streamed with a stop text
taken from the middle of the whole answer, and the error a missing model gets. Prints one
JSON object of what the client returned; crates/serve/tests/openai.rs judges it.
"""
import json
import sys

import openai


def main():
    url, model, prompt = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=url.rstrip("/") + "/v1", api_key="unused", max_retries=4)
    messages = [{"role": "user", "content": prompt}]
    settings = dict(model=model, messages=messages, temperature=0, max_tokens=24, seed=0)
    out = {"models": [m.id for m in client.models.list()]}

    whole = client.chat.completions.create(**settings)
    choice = whole.choices[0]
    out["whole"] = {"content": choice.message.content, "role": choice.message.role,
                    "finish_reason": choice.finish_reason,
                    "usage": whole.usage.model_dump(include={"prompt_tokens", "completion_tokens",
                                                            "total_tokens"})}

    def streamed(**extra):
        pieces, finish, usage, roles = [], None, None, []
        for chunk in client.chat.completions.create(stream=True, **settings, **extra):
            if chunk.usage is not None:
                usage = chunk.usage.model_dump(include={"prompt_tokens", "completion_tokens",
                                                        "total_tokens"})
            for c in chunk.choices:
                if c.delta.role:
                    roles.append(c.delta.role)
                if c.delta.content:
                    pieces.append(c.delta.content)
                finish = c.finish_reason or finish
        return {"content": "".join(pieces), "pieces": len(pieces), "finish_reason": finish,
                "usage": usage, "roles": roles}

    out["streamed"] = streamed(stream_options={"include_usage": True})
    text = choice.message.content
    # A stop text from the answer's middle: the answer ends just before its first place.
    stop = text[len(text) // 2:len(text) // 2 + 3]
    out["stop"] = stop
    out["stopped"] = streamed(stop=[stop])
    try:
        client.chat.completions.create(**{**settings, "model": "no-such-model"})
        out["missing"] = None
    except openai.NotFoundError as e:
        out["missing"] = {"status": e.status_code, "message": str(e)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
