"""The measuring tools of the reproduction, one module each (``benchmarks/README.md`` gives each one's command):
``bench_dape`` and ``bench_hf`` time DAPE's paths and the Hugging Face patch on a CPU, ``gpu_step``, ``fused_layer``
and ``feature_map`` a training step, one attention layer and the feature map on a GPU, ``fused_check`` checks the
fused kernel against the plain path in float64 on the device before anything is timed (the first step of
``fused_device.sh``, whose error rule ``cuda_options`` reads), ``fused_compile`` compiles the Triton kernels for a
CUDA target without a GPU and prints their registers, spills and shared memory (how a tile setting is chosen before
device time is spent), ``cuda_options`` names the compiled path's options a device run supports,
``calibrate_gpu`` measures the estimate's tokens/s, ``memory_fit`` sets the memory model against the measured peaks,
``adopt_device_run`` adopts a device run's results, ``op_counts`` and ``dispatch_cost`` measure what the estimate's
dispatch bound reads, ``job_cost_fit`` fits the design stage's job prices, ``ledger`` lists the looks a
configuration's history holds, ``faults`` damages and kills a smoke run to show it recovers, and ``harness`` holds
what they share; ``fused_device.sh`` runs the device measurements in one call and ``device_wheels.sh`` fetches the
wheels it needs. Each runs as ``python -m benchmarks.NAME`` from the repository root or as
``python benchmarks/NAME.py``; the tests import them as ``from benchmarks import NAME``. What finished experiments
measured is kept in ``benchmarks/results/README.md``, with the commit each script last existed at; the verdict
rules' calibration is part of the method and lives beside the claims, in :mod:`dape_core.report.calibration`.
"""
