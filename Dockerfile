# blurd's container image. The build stage runs CI's own steps (scripts/install-deps.sh, then
# make) on the CUDA 13.0 devel image, whose nvjpeg.h make checks gpu/nvjpeg_api.h against; the
# runtime stage holds build/blurd, the libraries it links and curl for the health check, on the
# matching runtime image, as a non-root user. The CUDA runtime is linked statically, so the image
# needs only the host's driver (--gpus all); nvJPEG (libnvjpeg.so.13, which the runtime image
# ships) is loaded at run time for the GPU codecs, and the build fails if the image lacks it.
#
# GPUs: the Makefile's CUDA_ARCH builds real code for sm_75, sm_80, sm_86, sm_89 and sm_90
# (Turing, Ampere, Ada, Hopper) and compute_90 PTX, which the driver compiles on a later GPU
# (Blackwell) when blurd loads its kernels. Without a GPU blurd serves on the CPU.
#
#   docker build -t blurd .
#   docker run --gpus all -p 8080:8080 blurd
FROM nvidia/cuda:13.0.0-devel-ubuntu24.04 AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/
RUN bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN make -j"$(nproc)"

FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04
COPY scripts/install-deps.sh /tmp/
RUN bash /tmp/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
    && ldconfig -p | grep -q 'libnvjpeg\.so\.13 ' \
    && groupadd --gid 10001 blurd \
    && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin blurd
COPY --from=build /src/build/blurd /usr/local/bin/blurd
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
ENV BLURD_BIND=0.0.0.0 \
    BLURD_PORT=8080
EXPOSE 8080
# On SIGTERM blurd drains for up to --drain-timeout (30 s): give `docker stop -t` at least that.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD curl -fsS -o /dev/null "http://127.0.0.1:${BLURD_PORT}/healthz" || exit 1
ENTRYPOINT ["/usr/local/bin/blurd"]
