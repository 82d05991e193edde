"""Simulated execution: model shapes, device peaks, a roofline cost model of one step, and the
``SimExecutor`` that stands in for the model runner (no torch; see docs/sim.md)."""
from engine.sim.cost_model import CostModel, CostParams, OpCost, StepWork
from engine.sim.executor import SimExecutor, synthetic_token
from engine.sim.hardware import DevicePeaks, get_device, known_devices
from engine.sim.model_shapes import ModelShape, get_model_shape, known_models

__all__ = ["CostModel", "CostParams", "OpCost", "StepWork", "SimExecutor", "synthetic_token",
           "DevicePeaks", "get_device", "known_devices", "ModelShape", "get_model_shape", "known_models"]
