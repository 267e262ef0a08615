import pytest

from offpeak_predictor.jobtime import job_estimate, steps_for_epochs


def test_steps_for_epochs_rounds_partial_batches_up():
    assert steps_for_epochs(epochs=1, dataset_size=1000, batch_size=64) == 16
    assert steps_for_epochs(epochs=3, dataset_size=1000, batch_size=64, num_gpus=2) == 24
    assert steps_for_epochs(epochs=0.5, dataset_size=1024, batch_size=64) == 8


def test_job_time_is_steps_times_step_plus_startup():
    est = job_estimate(step_seconds=0.2, step_seconds_p90=0.25, steps=1000, startup_seconds=30)
    assert est.job_seconds == pytest.approx(230.0)
    assert est.job_seconds_p90 == pytest.approx(310.0)
    assert est.job_seconds_p90 >= est.job_seconds


@pytest.mark.parametrize("kwargs", [dict(epochs=0, dataset_size=1, batch_size=1), dict(epochs=1, dataset_size=1, batch_size=0)])
def test_bad_epoch_arguments_are_rejected(kwargs):
    with pytest.raises(ValueError):
        steps_for_epochs(**kwargs)
