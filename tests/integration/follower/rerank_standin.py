"""A strict stand-in of a rerank API, written from the schema Cohere's /v2/rerank, Jina's /v1/rerank and vLLM's
/rerank share: a `model`, a non-empty `query`, a non-empty list of `documents` (text, or {"text": text}), optionally
`top_n` (1 or more) and `return_documents`; any other field, or a field of another shape, is a 400 naming it. The answer
ranks every document by a score (here the share of the query's words it holds), highest first, cut to top_n, with
`usage.total_tokens` (the words of each query-document pair). Each request's document count is kept (GET /seen).

Usage: python rerank_standin.py --port P
"""

from __future__ import annotations

import argparse

from aiohttp import web

FIELDS = {"model", "query", "documents", "top_n", "return_documents"}


def _refuse(message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error"}}, status=400)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    seen: list[int] = []

    async def rerank(request: web.Request) -> web.Response:
        body = await request.json()
        if not isinstance(body, dict) or set(body) - FIELDS:
            return _refuse(f"unknown fields {sorted(set(body) - FIELDS) if isinstance(body, dict) else body!r}")
        if not isinstance(body.get("model"), str) or not isinstance(body.get("query"), str) or not body["query"].strip():
            return _refuse("model and query: non-empty text")
        documents = body.get("documents")
        if not isinstance(documents, list) or not documents:
            return _refuse("documents: a non-empty list")
        texts = []
        for k, document in enumerate(documents):
            text = document.get("text") if isinstance(document, dict) and set(document) == {"text"} else document
            if not isinstance(text, str):
                return _refuse(f"documents[{k}]: text, or {{text}}")
            texts.append(text)
        top_n = body.get("top_n", len(texts))
        if not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1:
            return _refuse("top_n: a whole number of 1 or more")
        if not isinstance(body.get("return_documents", False), bool):
            return _refuse("return_documents: true or false")
        seen.append(len(texts))
        query = set(body["query"].split())
        scores = [len(query & set(t.split())) / max(len(query), 1) for t in texts]
        ranked = sorted(range(len(texts)), key=lambda i: -scores[i])[:top_n]
        results = [{"index": i, "relevance_score": scores[i]} for i in ranked]
        usage = {"total_tokens": sum(len(query) + len(t.split()) for t in texts)}
        return web.json_response({"id": "rerank-1", "results": results, "usage": usage})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "reranker"}]})

    async def kept(request: web.Request) -> web.Response:
        return web.json_response(seen)

    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_post("/v1/rerank", rerank)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/seen", kept)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
