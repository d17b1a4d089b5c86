# Sourced by run.sh and test.sh: which MNIST folder the run uses. $VKBLAS_DATA wins when set (the user's choice);
# else ../shared/data when present (the team's checkout layout); else vkblas looks in ~/.cache/vkblas.
if [ -z "${VKBLAS_DATA:-}" ] && [ -d ../shared/data ]; then
  VKBLAS_DATA=$(cd ../shared/data && pwd)
  export VKBLAS_DATA
fi
