"""OpenAPI document of the predictor HTTP API (served at /openapi.json), generated from the wire types
(`wire.py`) the server decodes with, so the document cannot drift from what is checked."""

from __future__ import annotations

from typing import Any

import msgspec

from offpeak_graph.schema import attrs_schema
from offpeak_predictor import wire

_REF = "#/components/schemas/{name}"


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def openapi_document(gpus: list[str]) -> dict[str, Any]:
    """The document; `gpus`: the catalogue's GPU types (data of this installation, listed in the request types)."""
    (predict, sample, collected, refit, predicted, sampled, stored, error), schemas = msgspec.json.schema_components(
        (*wire.REQUESTS, *wire.ANSWERS), ref_template=_REF)
    schemas["PredictRequest"]["properties"]["gpus"]["items"]["examples"] = gpus
    err = _json(error, "bad request: `error` names the field by its JSON path (`$.num_gpus`, `$.graph.ops.attrs[3].p`)"
                       " and says why")
    auth = {"401": _json(error, "no bearer token, or an Authorization header that is not UTF-8"),
            "403": _json(error, "wrong token, or the predictor has none configured")}
    too_large = _json(error, "body larger than the endpoint's limit (--max-body-bytes)")
    return {
        "openapi": "3.1.0",
        "info": {"title": "offpeak runtime predictor", "version": "v1",
                 "description": "Training step / job runtime predictions per GPU type. Fields not listed are "
                                "ignored; a model graph's own rules are docs/model-graph.md's."},
        "paths": {
            "/v1/predict": {"post": {
                "summary": "Predict step and job seconds of a model graph on GPU types",
                "requestBody": {"required": True, "content": {"application/json": {"schema": predict}}},
                "responses": {
                    "200": _json(predicted, "one prediction per GPU asked"),
                    "400": err, "413": too_large,
                    "503": _json(error, "the prediction ran past its deadline (ServerSettings.predict_deadline_s)"),
                },
            }},
            "/v1/samples": {"post": {
                "summary": "Store an observed runtime; a plausible one corrects the next prediction at once",
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": sample}}},
                "responses": {
                    "201": _json(sampled, "accepted and learned from"),
                    "202": _json(sampled, "stored, not learned from (no graph or no step time)"),
                    "400": err, **auth,
                    "413": _json(error, "body over the limit, or a sample whose stored row alone is more than all "
                                        "samples may take (--max-sample-mib)"),
                    "422": _json(sampled, "quarantined: more than 5x off the model's prediction"),
                },
            }},
            "/v1/collected": {"post": {
                "summary": "Store rows `offpeak collect` measured on one GPU type; its model rows calibrate that GPU "
                           "type's predictions at once (docs/collect.md). All rows are checked before any is "
                           "stored, and all are stored in one transaction, or none",
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": collected}}},
                "responses": {
                    "201": _json(stored, "stored: rows written and the GPU type's calibration now"),
                    "400": err, **auth, "413": too_large,
                    "503": _json(error, "no benchmark DB configured (--db)"),
                },
            }},
            "/v1/model/refit": {"post": {
                "summary": "Re-fit the step model from accepted samples; promote it when its held-out error is not "
                           "worse than the serving model's (needs --model-store and --db)",
                "security": [{"bearer": []}],
                "requestBody": {"required": False, "content": {"application/json": {"schema": refit}}},
                "responses": {"200": {"description": "the shadow evaluation, the decision and the version served"},
                              "400": err, **auth,
                              "409": _json(error, "the model store refused (says why)"),
                              "503": _json(error, "no model store configured")},
            }},
            "/v1/model/rollback": {"post": {
                "summary": "Serve the previous model version again",
                "security": [{"bearer": []}],
                "responses": {"200": {"description": "the store's pointer and the version served"}, **auth,
                              "409": _json(error, "nothing to roll back"),
                              "503": _json(error, "no model store configured")},
            }},
            "/healthz": {"get": {"responses": {"200": {"description": "alive"}}}},
            "/readyz": {"get": {"responses": {"200": {"description": "model loaded"}}}},
            "/metrics": {"get": {"description": "On the --metrics-port listener when one is set (then 404 here).",
                                  "responses": {"200": {"description": "Prometheus metrics"}}}},
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "the shared secret (--token-file)"}},
        },
        # a model graph's op attributes, typed by op kind (other keys, and other op kinds, are free)
        "x-op-attrs": attrs_schema(),
    }  # fmt: skip
