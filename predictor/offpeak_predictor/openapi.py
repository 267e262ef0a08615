"""OpenAPI 3.0 document of the predictor HTTP API (served at /openapi.json)."""

from __future__ import annotations

from typing import Any

from offpeak_graph.schema import PRECISIONS, PRECISION_HELP

_PREDICTION = {
    "type": "object",
    "properties": {
        "gpu": {"type": "string", "description": "GPU name as asked"},
        "gpu_type": {"type": "string", "description": "canonical catalogue name (node label value)"},
        "step_seconds": {"type": "number"}, "step_seconds_p90": {"type": "number"},
        "job_seconds": {"type": "number"}, "job_seconds_p90": {"type": "number"},
        "model_version": {"type": "string"},
        "peak_memory_gib": {"type": "number", "description": "peak GPU memory of one step per GPU (GiB, as "
                            "torch.cuda.max_memory_allocated reports it); absent for an unmodelled optimizer"},
        "gpu_memory_gib": {"type": "number", "description": "this GPU type's memory (GiB)"},
        "fits_memory": {"type": "boolean", "description": "peak within 95 % of the GPU's memory"},
        "correction": {"type": "object", "description": "how measured samples changed the model's answer",
                       "properties": {"samples": {"type": "integer"},
                                      "level": {"type": "string", "enum": ["model", "gpu", "family", "graph"]},
                                      "factor": {"type": "number"}, "p90_factor": {"type": "number"},
                                      "model_step_seconds": {"type": "number"}}},
    },
    "required": ["gpu", "gpu_type", "step_seconds", "step_seconds_p90", "model_version"],
}  # fmt: skip
_SAMPLE_ANSWER = {"type": "object", "properties": {
    "id": {"type": "integer"}, "status": {"type": "string", "enum": ["accepted", "unverified", "quarantined"]},
    "reason": {"type": "string"}, "error": {"type": "string"}, "model_version": {"type": "string"},
    "predicted_step_seconds": {"type": "number", "nullable": True}, "correction": {"type": "object"}}}  # fmt: skip
_ERROR = {"type": "object", "properties": {"error": {"type": "string"}, "known_gpus": {"type": "array",
          "items": {"type": "string"}}}, "required": ["error"]}  # fmt: skip


def openapi_document(gpus: list[str]) -> dict[str, Any]:
    err = {"description": "bad request", "content": {"application/json": {"schema": _ERROR}}}
    return {
        "openapi": "3.0.3",
        "info": {"title": "offpeak runtime predictor", "version": "v1",
                 "description": "Training step / job runtime predictions per GPU type."},
        "paths": {
            "/v1/predict": {"post": {
                "summary": "Predict step and job seconds of a model graph on GPU types",
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object",
                    "properties": {
                        "graph": {"type": "object", "description": "model graph JSON (offpeak.io/model-graph/v1), "
                                  "inline (no graph_url: the predictor fetches nothing); finite, non-negative "
                                  "numbers, known mode/precision/optimizer, batch_size >= 1, 1..200,000 ops"},
                        "gpus": {"type": "array", "items": {"type": "string", "enum": gpus}, "minItems": 1},
                        "mode": {"type": "string", "enum": ["train", "inference"]},
                        "precision": {"type": "string", "enum": list(PRECISIONS), "description": PRECISION_HELP},
                        "optimizer": {"type": "string", "enum": ["sgd", "adam", "adamw", "none"]},
                        "steps": {"type": "integer", "minimum": 0, "maximum": 10**12},
                        "startup_seconds": {"type": "number", "minimum": 0,
                                            "description": "seconds before the first step (pod start, data "
                                                           "loading) added to job_seconds; default 60"},
                        "num_gpus": {"type": "integer", "minimum": 1},
                        "gpus_per_node": {"type": "integer", "minimum": 1,
                                          "description": "GPUs of the job in one node (it must divide num_gpus); "
                                                         "the rest talk over the network, whose all-reduce is "
                                                         "added and named in each answer's interconnect; default: "
                                                         "all in one node"},
                    },
                    "required": ["graph", "gpus"],
                }}}},
                "responses": {
                    "200": {"description": "predictions", "content": {"application/json": {"schema": {
                        "type": "object",
                        "properties": {"model_version": {"type": "string"}, "graph_hash": {"type": "string"},
                                       "predictions": {"type": "array", "items": _PREDICTION}},
                    }}}},
                    "400": err, "413": {"description": "body too large"},
                    "503": {"description": "the prediction ran past its deadline (ServerSettings.predict_deadline_s)",
                            "content": {"application/json": {"schema": _ERROR}}},
                },
            }},
            "/v1/samples": {"post": {
                "summary": "Store an observed runtime; a plausible one corrects the next prediction at once",
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object",
                    "properties": {"graph": {"type": "object"}, "graph_hash": {"type": "string"},
                                   "gpu": {"type": "string"}, "step_seconds": {"type": "number", "minimum": 0},
                                   "job_seconds": {"type": "number", "minimum": 0},
                                   "steps": {"type": "integer", "minimum": 0, "maximum": 10**12},
                                   "startup_seconds": {"type": "number", "minimum": 0},
                                   "mode": {"type": "string", "enum": ["train", "inference"]},
                                   "precision": {"type": "string", "enum": list(PRECISIONS)},
                                   "optimizer": {"type": "string", "enum": ["sgd", "adam", "adamw", "none"]},
                                   "num_gpus": {"type": "integer", "minimum": 1},
                                   "batch_size": {"type": "integer", "minimum": 0},
                                   "model_family": {"type": "string"},
                                   "job": {"type": "string", "description": "namespace/name"},
                                   "replaces": {"type": "integer", "minimum": 1,
                                                "description": "id of an earlier sample of the same job (measured "
                                                               "while it ran) that this one replaces"}},
                    "required": ["gpu"],
                }}}},
                "responses": {
                    "201": {"description": "accepted and learned from",
                            "content": {"application/json": {"schema": _SAMPLE_ANSWER}}},
                    "202": {"description": "stored, not learned from (no graph or no step time)",
                            "content": {"application/json": {"schema": _SAMPLE_ANSWER}}},
                    "400": err, "401": {"description": "no bearer token"},
                    "403": {"description": "wrong token, or the predictor has none configured"},
                    "422": {"description": "quarantined: more than 5x off the model's prediction",
                            "content": {"application/json": {"schema": _SAMPLE_ANSWER}}},
                },
            }},
            "/v1/collected": {"post": {
                "summary": "Store rows `offpeak collect` measured on one GPU type; its model rows calibrate that GPU "
                           "type's predictions at once (docs/collect.md)",
                "security": [{"bearer": []}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object",
                    "properties": {"gpu": {"type": "string"}, "software": {"type": "string"},
                                   "model_rows": {"type": "array", "maxItems": 200, "items": {"type": "object"}},
                                   "op_rows": {"type": "array", "maxItems": 5000, "items": {"type": "object"}}},
                    "required": ["gpu"],
                }}}},
                "responses": {
                    "201": {"description": "stored: rows written (`already_stored`: rows of the same batch posted "
                                           "before, skipped, so a retried post stores nothing twice) and the GPU "
                                           "type's calibration now"},
                    "400": err, "401": {"description": "no bearer token"},
                    "403": {"description": "wrong token, or the predictor has none configured"},
                    "503": {"description": "no benchmark DB configured (--db)"},
                },
            }},
            "/v1/model/refit": {"post": {
                "summary": "Re-fit the step model from accepted samples; promote it when its held-out error is not "
                           "worse than the serving model's (needs --model-store and --db)",
                "security": [{"bearer": []}],
                "requestBody": {"required": False, "content": {"application/json": {"schema": {
                    "type": "object", "properties": {"dry_run": {"type": "boolean"}}}}}},
                "responses": {"200": {"description": "the shadow evaluation, the decision and the version served"},
                              "401": {"description": "no token"}, "403": {"description": "wrong token"},
                              "409": {"description": "the model store refused (say why)"},
                              "503": {"description": "no model store configured"}},
            }},
            "/v1/model/rollback": {"post": {
                "summary": "Serve the previous model version again",
                "security": [{"bearer": []}],
                "responses": {"200": {"description": "the store's pointer and the version served"},
                              "401": {"description": "no token"}, "403": {"description": "wrong token"},
                              "409": {"description": "nothing to roll back"},
                              "503": {"description": "no model store configured"}},
            }},
            "/healthz": {"get": {"responses": {"200": {"description": "alive"}}}},
            "/readyz": {"get": {"responses": {"200": {"description": "model loaded"}}}},
            "/metrics": {"get": {"description": "On the --metrics-port listener when one is set (then 404 here).",
                                  "responses": {"200": {"description": "Prometheus metrics"}}}},
        },
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                                      "description": "the shared secret (--token-file)"}}},
    }  # fmt: skip
